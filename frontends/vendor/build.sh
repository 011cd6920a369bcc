#!/bin/sh
# Rebuilds frontends/sale_page/vendor/ and frontends/console/vendor/ from the npm packages pinned in package-lock.json (no CDN):
# the ALTCHA widget's self-contained build (one ES module; its Web Worker is inlined and started
# from a blob: URL) and its licence. Run from anywhere: frontends/vendor/build.sh; commit the result.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
npm ci --ignore-scripts --omit=optional --no-audit --no-fund
out="$here/../sale_page/vendor/altcha"
mkdir -p "$out"
cp node_modules/altcha/dist/altcha.js "$out/altcha.js"
cp node_modules/altcha/LICENSE.txt "$out/LICENSE.txt"
version=$(node -p "require('./node_modules/altcha/package.json').version")
echo "frontends/sale_page/vendor/altcha/: altcha $version"
# The operator console's chart library: uPlot (small, fast, no dependencies), its IIFE build
# and stylesheet; the gateway serves them at /admin/console/vendor/.
console="$here/../console/vendor"
mkdir -p "$console"
cp node_modules/uplot/dist/uPlot.iife.min.js "$console/uPlot.iife.min.js"
cp node_modules/uplot/dist/uPlot.min.css "$console/uPlot.min.css"
cp node_modules/uplot/LICENSE "$console/uPlot.LICENSE"
version=$(node -p "require('./node_modules/uplot/package.json').version")
echo "frontends/console/vendor/: uplot $version"
