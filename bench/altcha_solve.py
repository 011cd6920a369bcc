"""What the ALTCHA challenge costs a buyer: the vendored widget's solve time per maxnumber.

    python -m bench.altcha_solve [--solves 7] [--maxnumber N ...] [--throttle 4]
                                 [--output bench/results/altcha_solve]

Starts an embedded Valkey on 127.0.0.1 for
``seckill.store.sale.admission.challenge.Challenges`` (every challenge is issued by
``Challenges.issue`` and every solution must pass ``Challenges.verify``, so only working
solves are timed), a static HTTP server on 127.0.0.1
over a temp folder holding a page and the vendored widget (``frontends/sale_page/vendor/altcha/``),
and Debian's Chromium, headless, through Playwright (``/usr/bin/chromium``; never
``playwright install``). Each solve is a fresh ``<altcha-widget>`` given the challenge
(``challengejson``) and timed from ``verify()`` to its ``verified`` state. By default the
maxnumbers are the steps of the difficulty curve. Writes ``<output>.md`` and ``<output>.json``.

Three modes. The widget as shipped solves in Web Workers (one per core), but Chromium's CDP
CPU throttling (``Emulation.setCPUThrottlingRate``) slows only a page's thread, never a
worker's ("Operation is only supported for pages, not workers"); so the widget is also run
with ``Worker`` hidden from the page, when it solves on the page's thread (its own fallback,
the same loop), unthrottled and throttled (``--throttle``, a phone-class core).

A solve's time is random (the answer is uniform in 0..maxnumber), so a row gives the median of
``--solves`` solves and, steadier, the mean implied by the measured hash rate:
maxnumber / (2 x threads x hashes per second per thread); and how long the widget took, after
its answer was found, to say so (it waits until every worker has stopped).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import http.server
import json
import math
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis

from bench.machine import describe, load_average
from seckill.ops.stack.embedded import EmbeddedValkey
from seckill.store.plumbing.keys import KeySpace
from seckill.store.sale.admission import challenge
from seckill.store.sale.admission.challenge import Challenges

REPO = Path(__file__).resolve().parent.parent
VENDOR = REPO / "frontends" / "sale_page" / "vendor" / "altcha"
LOCK = REPO / "frontends" / "vendor" / "package-lock.json"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"]
SECRET = "bench-altcha-secret-5d1e9a7c3b2f4e6a8c0d"

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>ALTCHA solve</title>
<script type="module" src="altcha.js"></script></head>
<body><script type="module">
// One solve: a fresh widget given the challenge; verify() timed until it says "verified".
window.solveOnce = (challenge) => new Promise((resolve, reject) => {
  const widget = document.createElement("altcha-widget");
  widget.setAttribute("challengejson", JSON.stringify(challenge));
  let started = 0;
  widget.addEventListener("statechange", (event) => {
    const { state, payload } = event.detail;
    if (state === "verified") {
      const ms = performance.now() - started;
      widget.remove();
      resolve({ ms, payload });
    } else if (state === "error") {
      widget.remove();
      reject(new Error("the widget failed to solve the challenge"));
    }
  });
  widget.addEventListener("load", () => {
    started = performance.now();
    widget.verify();
  });
  document.body.append(widget);
});
</script></body></html>
"""


def widget_version() -> str:
    """The altcha npm package's version in frontends/vendor/package-lock.json."""
    lock = json.loads(LOCK.read_text(encoding="utf-8"))
    return str(lock["packages"]["node_modules/altcha"]["version"])


@contextlib.contextmanager
def serve_page() -> Iterator[str]:
    """A static HTTP server on 127.0.0.1 over a temp folder with the page and the vendored
    widget; yields the page's URL."""
    with tempfile.TemporaryDirectory(prefix="altcha-page-") as folder:
        shutil.copy(VENDOR / "altcha.js", Path(folder) / "altcha.js")
        (Path(folder) / "index.html").write_text(PAGE, encoding="utf-8")

        class Quiet(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, directory=folder, **kwargs)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/index.html"
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """Headless Debian Chromium, through Playwright."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                             args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def open_page(browser: Any, url: str, workers: bool = True) -> Any:
    """A new page at ``url`` once the widget is defined; ``workers=False`` hides ``Worker``
    from it first, so the widget solves on the page's own thread (its fallback)."""
    page = browser.new_page()
    if not workers:
        page.add_init_script("delete window.Worker")
    page.goto(url)
    page.wait_for_function("customElements.get('altcha-widget') !== undefined")
    return page


def widget_solve(page: Any, issued: dict[str, Any]) -> dict[str, Any]:
    """Solve ``issued`` with the widget on ``page``: ``{"ms", "payload"}`` (base64)."""
    result: dict[str, Any] = page.evaluate("c => window.solveOnce(c)", issued)
    return result


def work_done(issued: dict[str, Any], payload: str, threads: int) -> tuple[int, float]:
    """What the thread that found the answer did: the numbers its slice had tried, and the
    seconds it reports (``took``)."""
    solved = json.loads(base64.b64decode(payload))
    size = math.ceil(issued["maxnumber"] / max(1, min(threads, issued["maxnumber"])))
    return int(solved["number"]) % size + 1, float(solved.get("took") or 0) / 1000


def curve_steps(challenges: Challenges) -> list[tuple[float, int]]:
    """The difficulty curve's steps: (the lowest rate of the step, its maxnumber)."""
    steps = [(0.0, challenges.difficulty(0))]
    rate = challenge.RISE_FROM
    while steps[-1][1] < challenges.cap:
        steps.append((rate, challenges.difficulty(rate)))
        rate *= challenge.RISE_FACTOR
    return steps


def measure(page: Any, client: redis.Redis, maxnumber: int, solves: int,
            threads: int) -> dict[str, Any]:
    """``solves`` widget solves of challenges issued at ``maxnumber``, each verified."""
    issuer = Challenges(client, KeySpace(f"bench{uuid.uuid4().hex[:8]}"), SECRET,
                        base=maxnumber, cap=maxnumber)
    samples, after, tried, seconds = [], [], 0, 0.0
    for i in range(solves):
        uid = f"buyer{i}"
        issued = issuer.issue("bench-sale", uid)
        assert issued["maxnumber"] == maxnumber, issued
        solved = widget_solve(page, issued)
        issuer.verify("bench-sale", uid, solved["payload"])  # ChallengeFailed: not a solve
        samples.append(float(solved["ms"]))
        numbers, took = work_done(issued, solved["payload"], threads)
        tried, seconds = tried + numbers, seconds + took
        after.append(float(solved["ms"]) - took * 1000)
    rate = tried / seconds if seconds > 0 else None
    return {
        "maxnumber": maxnumber,
        "ms": samples,
        "median_ms": statistics.median(samples),
        "mean_ms": statistics.fmean(samples),
        "after_find_ms": statistics.median(after),
        "hashes_per_second_per_thread": rate,
        "expected_ms": maxnumber / (2 * threads * rate) * 1000 if rate else None,
    }


def run(maxnumbers: list[int], solves: int, throttle: float) -> dict[str, Any]:
    """Every mode's measurements, with what they ran on."""
    modes: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="altcha-valkey-") as data, \
            EmbeddedValkey(data, appendfsync="everysec") as valkey, serve_page() as url, \
            chromium() as browser:
        client = redis.Redis.from_url(valkey.url, decode_responses=True)
        try:
            cores = 0
            for name, workers, rate in (
                ("desktop, the widget's workers", True, 1.0),
                ("desktop, one thread", False, 1.0),
                (f"{throttle:g}x throttled, one thread", False, throttle),
            ):
                page = open_page(browser, url, workers)
                cores = int(page.evaluate("navigator.hardwareConcurrency"))
                threads = min(16, cores) if workers else 1
                cdp = page.context.new_cdp_session(page)
                cdp.send("Emulation.setCPUThrottlingRate", {"rate": rate})
                measure(page, client, 5_000, 1, threads)  # warm-up, not counted
                rows = []
                for maxnumber in maxnumbers:
                    rows.append(measure(page, client, maxnumber, solves, threads))
                    print(f"{name}: maxnumber {maxnumber}: median {rows[-1]['median_ms']:.0f} "
                          f"ms", file=sys.stderr)
                modes[name] = {"threads": threads, "throttle": rate, "rows": rows}
                page.close()
        finally:
            client.close()
    return {"chromium": str(browser.version), "hardware_concurrency": cores, "modes": modes}


def report(results: dict[str, Any], command: str, steps: list[tuple[float, int]]) -> str:
    """The Markdown report."""
    modes = results["modes"]
    names = list(modes)
    by_max = {name: {row["maxnumber"]: row for row in mode["rows"]}
              for name, mode in modes.items()}
    lines = [
        "# ALTCHA solve time in a browser, per maxnumber",
        "",
        f"    {command}",
        "",
        f"Machine: {describe('altcha', 'playwright')}; load average before / after: "
        f"{results['load_before']} / {results['load_after']}. Chromium {results['chromium']} "
        f"(Debian's, headless), `navigator.hardwareConcurrency` {results['hardware_concurrency']}."
        f" Widget: npm altcha {widget_version()} (`frontends/sale_page/vendor/altcha/altcha.js`). "
        "Every challenge was issued by `seckill.store.sale.admission.challenge.Challenges` "
        f"and every solution passed its `verify`; {results['solves']} solves per cell, "
        f"{results['seconds']:.0f} s in all.",
        "",
        "Modes: *the widget's workers*: the widget as shipped, one Web Worker per core, each "
        "a slice of 0..maxnumber. *one thread*: `Worker` hidden from the page, so the widget "
        "solves on the page's thread (its own fallback, the same loop); CDP "
        "`Emulation.setCPUThrottlingRate` slows only a page's thread (Chromium answers "
        "\"Operation is only supported for pages, not workers\" on a worker), so the "
        "phone-class CPU is measured there: one core at 1/"
        f"{results['throttle']:g} the speed. A phone with *n* cores runs *n* workers: divide "
        "its time by about *n*.",
        "",
        "Cells: median of the solves (from `verify()` to the `verified` state, worker start-up "
        "included) / *expected*, the mean implied by the measured hash rate, maxnumber / "
        "(2 x threads x hashes per second per thread), steadier than a median of a few "
        "uniform draws / *after the find*: the median time from the finding thread's answer "
        "(its `took`) to the `verified` state (the widget waits until every worker has "
        "stopped).",
        "",
        "| maxnumber | issue rate (challenges/s) | "
        + " | ".join(f"{name}: median / expected / after the find" for name in names)
        + " | hashes/s per thread (" + " / ".join(names) + ") |",
        "|---:|---|" + "---:|" * len(names) + "---:|",
    ]
    bands = {maxnumber: _band(steps, i) for i, (_, maxnumber) in enumerate(steps)}

    def ms(value: float | None) -> str:
        return "?" if value is None else f"{value / 1000:,.2f} s"

    def khs(value: float | None) -> str:
        return "?" if value is None else f"{value / 1000:,.0f} k"

    for maxnumber in results["maxnumbers"]:
        rows = [by_max[name][maxnumber] for name in names]
        cells = [f"{ms(row['median_ms'])} / {ms(row['expected_ms'])} / "
                 f"{ms(row['after_find_ms'])}" for row in rows]
        rates = " / ".join(khs(row["hashes_per_second_per_thread"]) for row in rows)
        lines.append(f"| {maxnumber:,} | {bands.get(maxnumber, '(not a step)')} | "
                     + " | ".join(cells) + f" | {rates} |")
    return "\n".join(lines) + "\n"


def _band(steps: list[tuple[float, int]], i: int) -> str:
    low = steps[i][0]
    if i + 1 < len(steps):
        return f"{low:,.0f} to {steps[i + 1][0]:,.0f}" if low else f"below {steps[1][0]:,.0f}"
    return f"{low:,.0f} and more"


def _load(load: tuple[float, float, float]) -> str:
    return " ".join(f"{value:.2f}" for value in load)


def main(argv: list[str] | None = None) -> int:
    """Measure, print the report, write ``<output>.md`` and ``<output>.json``."""
    parser = argparse.ArgumentParser(prog="python -m bench.altcha_solve",
                                     description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--solves", type=int, default=7, help="solves per maxnumber and mode")
    parser.add_argument("--maxnumber", type=int, action="append",
                        help="a maxnumber to measure (repeatable; default: the curve's steps)")
    parser.add_argument("--throttle", type=float, default=4.0,
                        help="the CPU throttling rate of the phone-class run (default 4)")
    parser.add_argument("--output", default="bench/results/altcha_solve",
                        help="path of the report without extension (.md and .json written)")
    args = parser.parse_args(argv)
    probe = Challenges(redis.Redis(), KeySpace("bench"), SECRET)
    steps = curve_steps(probe)
    maxnumbers = args.maxnumber or [maxnumber for _, maxnumber in steps]
    started, load_before = time.time(), load_average()
    results = run(maxnumbers, args.solves, args.throttle)
    results.update(maxnumbers=maxnumbers, solves=args.solves, throttle=args.throttle,
                   seconds=round(time.time() - started, 1),
                   load_before=_load(load_before), load_after=_load(load_average()),
                   curve=[{"from_rate": rate, "maxnumber": m} for rate, m in steps])
    command = "python -m bench.altcha_solve " + " ".join(argv if argv is not None else
                                                          sys.argv[1:])
    text = report(results, command.strip(), steps)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.with_suffix(".md").write_text(text, encoding="utf-8")
    output.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n",
                                           encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
