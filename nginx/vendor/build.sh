#!/bin/sh
# Rebuilds nginx/static/vendor/ from the npm packages pinned in package-lock.json (no CDN):
# the ALTCHA widget's self-contained build (one ES module; its Web Worker is inlined and started
# from a blob: URL) and its licence. Run from anywhere: nginx/vendor/build.sh; commit the result.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
npm ci --ignore-scripts --omit=optional --no-audit --no-fund
out="$here/../static/vendor/altcha"
mkdir -p "$out"
cp node_modules/altcha/dist/altcha.js "$out/altcha.js"
cp node_modules/altcha/LICENSE.txt "$out/LICENSE.txt"
version=$(node -p "require('./node_modules/altcha/package.json').version")
echo "nginx/static/vendor/altcha/: altcha $version"
