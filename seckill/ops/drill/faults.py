"""The drill's operator calls and faults, each waiting on a condition (the operator's answer,
the supervisor's line that a child is back, ``/healthz``), never on a guessed sleep.

In order, at planned moments of the crowd: pause one activity from the operator API and resume
it; kill -9 a Valkey master (on a cluster: the one owning the busiest activity), a gunicorn
instance, the orders worker, nginx; stop the whole stack with SIGTERM (a Ctrl-C) and start it
again on the same data.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from edge.identity import mint_user_token
from seckill.ops.drill.crowd import Client, Crowd
from seckill.ops.drill.report import Fault
from seckill.ops.drill.stack import DrillStack

OPERATOR_TRIES = 40  # an operator call is retried this often (0.25 s apart) while it fails


class Operator:
    """The operator API of one deployment, for the drill's own activities only."""

    def __init__(self, admin_base: str, token: str) -> None:
        self.client = Client(admin_base)
        self.token = token

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
        """One operator call: ``(status, body)``."""
        status, answer, _ = self.client.call(method, path, self.token, body)
        return status, answer

    def insist(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any], int]:
        """Repeat a call while it gets no answer or a 5xx (bounded); ``(status, body,
        failed tries)``: an operator action must work under the crowd."""
        failures = 0
        for _ in range(OPERATOR_TRIES):
            status, answer = self.call(method, path, body)
            if status and status < 500:
                return status, answer, failures
            failures += 1
            time.sleep(0.25)
        return status, answer, failures

    def stats(self, aid: str) -> dict[str, Any]:
        """``GET /admin/activities/<aid>/stats`` (bounded retries); {} when unanswered."""
        status, body, _ = self.insist("GET", f"/admin/activities/{quote(aid)}/stats")
        return body if status == 200 else {}

    def all_stats(self, aids: list[str]) -> dict[str, dict[str, Any]]:
        """The stats of each activity."""
        return {aid: self.stats(aid) for aid in aids}

    def drained(self, aids: list[str], timeout: float = 90.0) -> dict[str, dict[str, Any]]:
        """Poll until no order is pending in any activity (bounded); the last stats. Pending
        by the stats (decided, not stored) and by the orders streams (the console's
        ``oldest_pending_s``: an entry not acknowledged yet). The stats alone miss an entry a
        killed worker had read, which waits for the next worker's reclaim (30 s idle), once
        its order's payment hold has expired meanwhile (no longer a decided, unstored order
        to the stats); the database was then read before it was stored."""
        deadline = time.monotonic() + timeout
        while True:
            stats = self.all_stats(aids)
            pending = [int((s.get("orders") or {}).get("pending", -1)) for s in stats.values()]
            if ((all(n == 0 for n in pending) and self._streams_drained(aids))
                    or time.monotonic() > deadline):
                return stats
            time.sleep(0.25)

    def _streams_drained(self, aids: list[str]) -> bool:
        """Whether every one of ``aids`` the console lists has no unacknowledged entry (one
        it does not list, a rehearsal, is judged by its stats alone)."""
        status, body = self.call("GET", "/admin/console/state")
        if status != 200:
            return False
        wanted = set(aids)
        return all(float(row.get("oldest_pending_s") or 0) == 0
                   for row in body.get("activities") or () if row.get("id") in wanted)

    def close(self) -> None:
        """Drop the connection."""
        self.client.close()


class Canary:
    """One user of its own, asking for a purchase URL: sees what a buyer sees now."""

    def __init__(self, base: str, jwt_secret: str, aid: str) -> None:
        self.client = Client(base)
        self.token = mint_user_token("drill-canary", jwt_secret, 3 * 3600)
        self.aid = aid

    def wait_for(self, wanted: Callable[[int, str], bool], timeout: float = 30.0) -> bool:
        """Ask (4 a second: under the per-user rate) until ``wanted(status, error)``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status, _, error = self.client.call(
                "GET", f"/seckill/url?activity={quote(self.aid)}", self.token)
            if wanted(status, error):
                return True
            time.sleep(0.25)
        return False


class Faults:
    """The faults of an embedded drill, each filling its :class:`Fault` step."""

    def __init__(self, stack: DrillStack, operator: Operator, canary: Canary, aid: str,
                 aids: list[str], crowd: Crowd) -> None:
        self.stack, self.operator, self.canary = stack, operator, canary
        self.crowd = crowd
        self.aid, self.aids = aid, aids
        self.snapshots: list[tuple[str, dict[str, dict[str, Any]]]] = []

    def plan(self) -> list[tuple[float, str, Callable[[Fault], None]]]:
        """``(fraction of the crowd's duration, step name, the step)``, in order."""
        steps: list[tuple[float, str, Callable[[Fault], None]]] = [
            (0.08, "pause", self.pause),
            (0.15, "resume", self.resume),
            (0.24, "kill -9 valkey", self.kill_valkey),
            (0.36, "kill -9 gunicorn", lambda f: self.kill(f, "gunicorn-1")),
            (0.47, "kill -9 orders worker", lambda f: self.kill(f, "orders-worker")),
            (0.52, "kill -9 webhooks dispatcher", lambda f: self.kill(f, "webhooks")),
        ]
        if self.stack.nginx:
            steps.append((0.57, "kill -9 nginx", lambda f: self.kill(f, "nginx")))
        steps.append((0.67, "stop and start", self.restart))
        return steps

    def _since(self, fault: Fault, started: float) -> float:
        return round(time.monotonic() - started, 2)

    def pause(self, fault: Fault) -> None:
        """Pause the busiest activity from the operator API; back = buyers see ``paused``."""
        started = time.monotonic()
        status, _, failures = self.operator.insist(
            "POST", f"/admin/activities/{quote(self.aid)}/pause")
        fault.note = self._operator_note("pause", status, failures)
        if self.canary.wait_for(lambda s, e: s == 503 and e == "paused"):
            fault.back_after = self._since(fault, started)

    def resume(self, fault: Fault) -> None:
        """Resume it; back = a buyer gets a purchase URL again."""
        started = time.monotonic()
        status, _, failures = self.operator.insist(
            "POST", f"/admin/activities/{quote(self.aid)}/resume")
        fault.note = self._operator_note("resume", status, failures)
        if self.canary.wait_for(lambda s, e: s in (200, 410)):
            fault.back_after = self._since(fault, started)
        self.healthy(fault, started)

    @staticmethod
    def _operator_note(what: str, status: int, failures: int) -> str:
        if status == 200 and not failures:
            return ""
        return (f"the operator's {what} answered {status or 'nothing'} after {failures} "
                "failed tries (502/503/none)")

    def healthy(self, fault: Fault, started: float) -> None:
        """Note when ``/healthz`` answered 200 again after ``started`` (bounded)."""
        if self.stack.wait_healthy(60):
            fault.healthy_after = self._since(fault, started)
        else:
            fault.note = (fault.note + "; " if fault.note else "") + "/healthz not 200 in 60 s"

    def kill_valkey(self, fault: Fault) -> None:
        """kill -9 the Valkey (master) that holds the busiest activity."""
        self.kill(fault, self.stack.redis_master_to_kill("{" + self.aid + "}"))

    def kill(self, fault: Fault, name: str) -> None:
        """kill -9 one child; back = the supervisor says it answers again."""
        started = time.monotonic()
        fault.name = f"kill -9 {name}"
        fault.back_after = round(self.stack.kill_child(name), 2)
        self.healthy(fault, started)

    def restart(self, fault: Fault) -> None:
        """SIGTERM to ``seckill up`` (a Ctrl-C), then ``seckill up`` again on the same data;
        the counters are read just before and just after."""
        self.snapshots.append(("before the stop", self.operator.all_stats(self.aids)))
        started, shift = time.monotonic(), self.crowd.shift
        self.crowd.hold()
        code, took = self.stack.stop()
        if code != 0:
            fault.note = f"`seckill up` exited {code} on SIGTERM (expected 0)"
        else:
            fault.note = f"stopped cleanly in {took:.1f} s"
        self.operator.client.close()
        try:
            self.stack.start()
            fault.back_after = self._since(fault, started)
            self.healthy(fault, started)
        finally:
            self.crowd.release()
        fault.note += f"; no new buyer arrived for {self.crowd.shift - shift:.1f} s (site down)"
        self.snapshots.append(("after the start", self.operator.all_stats(self.aids)))
