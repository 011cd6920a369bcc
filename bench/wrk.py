"""Running ``wrk`` with a Lua script that walks through a file of pre-minted requests.

The requests file has one line per request: ``path TAB jwt`` (the jwt may be empty). Each wrk
thread takes every n-th line, pre-formats its requests in ``init`` and sends them in order,
so every request is a different user when the file says so.

Two ways to end a run:

* **timed** (``limit=False``): wrk's ``-d``; a thread that runs out of lines starts over and
  counts it (``wrapped``), which the reports show;
* **counted** (``limit=True``): every line is sent exactly once. ``delay()`` holds a
  connection back once its thread has handed out all its lines; when a thread has all its
  answers it stops and touches a file, and once every thread has, we SIGINT wrk (by its PID),
  which then prints its summary at once. (``wrk.thread:stop()`` alone ends the thread but wrk's
  main thread still sleeps out ``-d``.) ``-d`` stays as the upper bound of such a run.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MARKER = "BENCH_JSON "

_SCRIPT = r"""
local thread_count = 0
local threads = {}

function setup(thread)
  thread:set("id", thread_count)
  thread_count = thread_count + 1
  table.insert(threads, thread)
end

function init(args)
  local file, nthreads, method = args[1], tonumber(args[2]), args[3]
  counted = args[4] == "1"
  done_dir = args[5]
  requests_ = {}
  local i = 0
  for line in io.lines(file) do
    if i % nthreads == id then
      -- path, then optionally a JWT and (a POST's) JSON body, tab-separated
      local path, jwt, body = line:match("^([^\t]*)\t?([^\t]*)\t?(.*)$")
      local headers = {}
      if jwt ~= "" then headers["Authorization"] = "Bearer " .. jwt end
      if body ~= "" then headers["Content-Type"] = "application/json" end
      if method == "POST" then
        requests_[#requests_ + 1] = wrk.format("POST", path, headers, body)
      else
        requests_[#requests_ + 1] = wrk.format("GET", path, headers)
      end
    end
    i = i + 1
  end
  -- wrk calls request() once on its first thread to check it, before any connection: that
  -- call must not use up a line
  peek = (id == 0)
  pos = 0
  handed = 0
  answered = 0
  wrapped = 0
  overrun = 0
  statuses = {}
  caches = {}
end

function request()
  if peek then
    peek = false
    return requests_[1]
  end
  pos = pos + 1
  -- a connection's first request comes without delay(): count it as handed out here
  if pos > handed then handed = pos end
  if pos > #requests_ then
    if counted then
      overrun = overrun + 1
      pos = #requests_
    else
      pos = 1
      wrapped = wrapped + 1
    end
  end
  return requests_[pos]
end

function response(status, headers, body)
  local key = tostring(status)
  statuses[key] = (statuses[key] or 0) + 1
  answered = answered + 1
  -- nginx's X-Cache (HIT: repeated from its cache), where the route has one
  local cache = headers["X-Cache"]
  if cache then caches[cache] = (caches[cache] or 0) + 1 end
  if counted and answered >= #requests_ then
    local marker = io.open(done_dir .. "/done-" .. id, "w")
    if marker then marker:close() end
    wrk.thread:stop()
  end
end

function done(summary, latency, requests)
  local counts, cached = {}, {}
  local wraps, overruns, answers = 0, 0, 0
  for _, thread in ipairs(threads) do
    local s = thread:get("statuses")
    for k, v in pairs(s) do counts[k] = (counts[k] or 0) + v end
    for k, v in pairs(thread:get("caches")) do cached[k] = (cached[k] or 0) + v end
    wraps = wraps + thread:get("wrapped")
    overruns = overruns + thread:get("overrun")
    answers = answers + thread:get("answered")
  end
  local parts = {}
  for k, v in pairs(counts) do parts[#parts + 1] = string.format('"%s": %d', k, v) end
  local cache_parts = {}
  for k, v in pairs(cached) do
    cache_parts[#cache_parts + 1] = string.format('"%s": %d', k, v)
  end
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests": %d, "answered": %d, "duration_us": %d, "p50_us": %d, ' ..
    '"p90_us": %d, "p99_us": %d, "mean_us": %.1f, "max_us": %d, "wrapped": %d, ' ..
    '"overrun": %d, "statuses": {%s}, "cache": {%s}, "errors": {"connect": %d, "read": %d, ' ..
    '"write": %d, "status": %d, "timeout": %d}}\n',
    summary.requests, answers, summary.duration, latency:percentile(50),
    latency:percentile(90), latency:percentile(99), latency.mean, latency.max, wraps,
    overruns, table.concat(parts, ", "), table.concat(cache_parts, ", "), e.connect, e.read,
    e.write, e.status, e.timeout))
end
"""

# Counted runs only: a connection whose thread has handed out every line waits (60 s, far
# beyond the run) instead of sending a repeat. delay() comes before every request().
_DELAY = r"""
function delay()
  if counted then
    if handed >= #requests_ then return 60000 end
    handed = handed + 1
  end
  return 0
end
"""


def script_text(counted: bool) -> str:
    return _SCRIPT + (_DELAY if counted else "")


@dataclass
class WrkResult:
    requests: int  # responses wrk counted (summary.requests)
    answered: int  # responses the Lua script saw
    seconds: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    statuses: dict[str, int]
    errors: dict[str, int]
    wrapped: int
    overrun: int
    complete: bool  # counted runs: every line was answered before -d ran out
    # answers by nginx's X-Cache header (HIT: repeated from its cache); empty without one
    cache: dict[str, int] = field(default_factory=dict)
    raw: str = field(repr=False, default="")

    @property
    def rate(self) -> float:
        return self.requests / self.seconds if self.seconds > 0 else 0.0

    @property
    def socket_errors(self) -> int:
        """connect, read, write errors and timeouts (not non-2xx statuses)."""
        return sum(v for k, v in self.errors.items() if k != "status")


def _parse(stdout: str) -> dict[str, Any]:
    for line in stdout.splitlines():
        if line.startswith(MARKER):
            parsed: dict[str, Any] = json.loads(line[len(MARKER):])
            return parsed
    raise RuntimeError(f"wrk printed no result line:\n{stdout[-3000:]}")


def run_wrk(
    base: str,
    requests_file: Path,
    method: str,
    *,
    threads: int,
    connections: int,
    duration: float,
    timeout: float,
    counted: bool = False,
    lines: int = 0,
) -> WrkResult:
    """One bounded wrk run against ``base``; ``counted`` sends each of the file's ``lines``
    requests once and ends when all are answered (``duration`` is then only the bound)."""
    threads = max(1, min(threads, connections))
    if counted and lines < threads:
        raise ValueError(f"a counted run needs at least {threads} lines, got {lines}")
    with tempfile.TemporaryDirectory(prefix="seckill-wrk-") as folder:
        done_dir = Path(folder)
        script = done_dir / "walk.lua"
        script.write_text(script_text(counted), encoding="utf-8")
        seconds = max(1, round(duration))
        command = [
            "wrk", "-t", str(threads), "-c", str(connections), "-d", f"{seconds}s",
            "--timeout", f"{timeout:g}s", "--latency", "-s", str(script), base,
            "--", str(requests_file), str(threads), method, "1" if counted else "0",
            str(done_dir),
        ]
        with tempfile.TemporaryFile(mode="w+", encoding="utf-8") as out, \
                tempfile.TemporaryFile(mode="w+", encoding="utf-8") as err:
            process = subprocess.Popen(command, stdout=out, stderr=err,
                                       stdin=subprocess.DEVNULL)
            complete = not counted
            try:
                deadline = time.monotonic() + seconds + 60
                while process.poll() is None and time.monotonic() < deadline:
                    if counted and not complete:
                        finished = len(list(done_dir.glob("done-*")))
                        if finished >= threads:
                            complete = True
                            with contextlib.suppress(ProcessLookupError):
                                os.kill(process.pid, signal.SIGINT)
                    time.sleep(0.02)
                if process.poll() is None:
                    process.kill()
                    process.wait(10)
                    raise RuntimeError(f"wrk did not finish within {seconds + 60}s")
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait(10)
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
        if process.returncode not in (0, -signal.SIGINT):
            raise RuntimeError(f"wrk failed ({process.returncode}):\n{stdout}\n{stderr}")
        got = _parse(stdout)
    return WrkResult(
        requests=int(got["requests"]),
        answered=int(got["answered"]),
        seconds=got["duration_us"] / 1e6,
        p50_ms=got["p50_us"] / 1000,
        p90_ms=got["p90_us"] / 1000,
        p99_ms=got["p99_us"] / 1000,
        max_ms=got["max_us"] / 1000,
        statuses={k: int(v) for k, v in got["statuses"].items()},
        errors={k: int(v) for k, v in got["errors"].items()},
        wrapped=int(got["wrapped"]),
        overrun=int(got["overrun"]),
        complete=complete,
        cache={k: int(v) for k, v in got.get("cache", {}).items()},
        raw=stdout,
    )
