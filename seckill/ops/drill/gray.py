"""The drill's gray failures: parts that hang or fill up rather than die, and their invariants.

A process is frozen with SIGSTOP (longer than nginx's timeouts), then continued: a Valkey
master, one gunicorn instance, the database (SQLite: a connection of the drill's own holding
the write lock; PostgreSQL: the drill's own proxy in front of it, never the server). The data
disk, a tmpfs the drill mounts itself, is filled and freed. The shop's webhook receiver goes
down, slow, answers 500 and cuts its answers. Operator levers are sent while the database
hangs. Each fault keeps a :class:`Window` of what happened when; the invariants are pure
functions of those windows and the crowd's records (unit-tested on made-up timelines).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import Any
from urllib.parse import quote

from seckill.ops.drill.checks import Invariant, StoredRow
from seckill.ops.drill.crowd import Client, Crowd, Record
from seckill.ops.drill.database import activity_row
from seckill.ops.drill.dbfaults import Proxy, WriteLock
from seckill.ops.drill.faults import Operator
from seckill.ops.drill.report import Fault
from seckill.ops.drill.stack import DrillStack
from seckill.ops.drill.webhooks import Receiver
from seckill.ops.stack.cluster import DEFAULT_NODE_TIMEOUT_MS
from seckill.ops.stack.nginx import NginxOptions

# A freeze lasts longer than nginx's read timeout, so that nginx gives up on the part first.
FREEZE_S = float(NginxOptions.read_timeout) + 2.0
DISK_FULL_S = 8.0
FILL_MIB_PER_S = 64.0  # how fast the drill's file fills the data disk
RECEIVER_FAULT_S = 2.5  # each of the receiver's four bad moods
LEVER_BOUND_S = 5.0  # an operator lever answers within this, the database hung or not
DATABASE_BOUND_S = 5.0  # a route needing the database answers within this when it is away
RESUME_BOUND_S = 30.0  # sales resume this soon after the disk has room again
FOLLOW_S = 1.0  # every process follows a new master within node timeout + this of the failover
# What a purchase may meet on a cluster whose nodes share a full disk (disk_full_refuses).
CLUSTER_DISK_ANSWERS = frozenset({"ConnectionError", "NotSent", "ClusterDownError"})
# Refusals before anything was decided that a gateway says "storage" only while its disk is
# full: answered once it had room again, they are the truth (a node still restarting).
UNDECIDED_ANSWERS = frozenset({"no_replica", "NotSent", "ClusterDownError"})
LEVER_GAP_S = 2.0  # pause, then resume this later, then end this later again


@dataclasses.dataclass
class Window:
    """When one gray fault began and ended (seconds since the drill's start), and what it
    saw."""

    kind: str
    start: float
    end: float
    not_run: str = ""  # why it did not run (the fault is reported, never dropped)
    info: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Probe:
    """One request sent while a part was away: what, when, how long, what came."""

    what: str
    at: float
    took: float
    status: int
    error: str
    body: str


@dataclasses.dataclass(frozen=True)
class Lever:
    """One operator lever sent while the database hung."""

    what: str
    at: float
    took: float
    status: int
    body: dict[str, Any]


def _bad_answer(r: Record) -> bool:
    """No answer, or a 5xx that is not a refusal (the outcome unknown)."""
    return r.status == 0 or (r.status >= 500 and not r.refused())


class GrayFaults:
    """The gray faults of an embedded drill, each filling its :class:`Fault` step and a
    :class:`Window`."""

    def __init__(self, stack: DrillStack, operator: Operator, crowd: Crowd, aid: str,
                 receiver: Receiver | None, proxy: Proxy | None, disk_reason: str,
                 healthy: Callable[[Fault, float], None]) -> None:
        self.stack, self.operator, self.crowd = stack, operator, crowd
        self.aid, self.receiver, self.proxy = aid, receiver, proxy
        self.disk_reason = disk_reason  # "" when the small disk is mounted
        self._healthy = healthy
        self.windows: list[Window] = []
        self.probes: list[Probe] = []
        self.levers: list[Lever] = []

    def plan(self) -> list[tuple[str, str, Callable[[Fault], None]]]:
        """``(selection name, step name, the step)``, in order (the lever ``end`` last: it
        ends the busiest activity)."""
        return [
            ("freeze-valkey", "freeze valkey", self.freeze_valkey),
            ("freeze-instance", "freeze gunicorn-1", self.freeze_instance),
            ("webhook-receiver", "webhook receiver down/500/cut/slow", self.receiver_moods),
            ("disk-full", "data disk full", self.disk_full),
            ("database-stop", "database stopped", self.database_stop),
            ("database-hang", "database hung + levers", self.database_hang),
        ]

    # -- helpers -------------------------------------------------------------------------

    def _now(self) -> float:
        return self.crowd.now()

    def _first_answered(self, after: float, timeout: float) -> float | None:
        """Seconds from ``after`` to the first purchase sent since that was decided (not a
        5xx, not lost): sales go on; None if none came within ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            times = [r.at for r in list(self.crowd.records)
                     if r.endpoint == "buy" and r.at >= after and not _bad_answer(r)
                     and not (r.status == 503 and r.refused())]
            if times:
                return round(min(times) - after, 2)
            time.sleep(0.25)
        return None

    def _probe(self, stop: threading.Event, window: Window) -> None:
        """Every second while the database is away: /healthz and a route that reads it."""
        client = Client(self.stack.admin_base)
        try:
            while not stop.is_set():
                for what, path in (("healthz", "/healthz"),
                                   ("activities list", "/admin/activities?state=open")):
                    at = self._now()
                    started = time.monotonic()
                    status, body, error = client.call("GET", path, self.stack.admin_token)
                    self.probes.append(Probe(what, round(at, 2),
                                             round(time.monotonic() - started, 2), status,
                                             error, str(body)[:200]))
                stop.wait(1.0)
        finally:
            client.close()

    # -- the faults ----------------------------------------------------------------------

    def freeze_valkey(self, fault: Fault) -> None:
        """SIGSTOP the Valkey (master) holding the busiest activity, then SIGCONT."""
        name = self.stack.redis_master_to_kill("{" + self.aid + "}")
        fault.name = f"freeze {name}"
        failover = bool(self.stack.redis_nodes and self.stack.replicas)
        window = Window("freeze-valkey", self._now(), 0.0, info={
            "node": name, "failover": failover,
            "node_timeout": DEFAULT_NODE_TIMEOUT_MS / 1000})
        self.windows.append(window)
        group = self.stack.signal_child(name, signal.SIGSTOP)
        deadline = time.monotonic() + FREEZE_S
        while time.monotonic() < deadline:
            # When a replica took the frozen master's slots over (the cluster's own view).
            if failover and "failover_at" not in window.info:
                owner = self.stack.slot_owner("{" + self.aid + "}", avoid=name)
                if owner is not None and owner != name:
                    window.info["failover_at"] = self._now()
            time.sleep(max(0.0, min(0.1, deadline - time.monotonic())))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGCONT)
        window.end = self._now()
        fault.note = f"frozen {FREEZE_S:.0f} s" + (" (a replica takes over)" if failover
                                                   else " (no replica: sales wait)")
        fault.back_after = self._first_answered(window.start, 30.0)
        self._healthy(fault, time.monotonic() - (self._now() - window.start))

    def freeze_instance(self, fault: Fault) -> None:
        """SIGSTOP one gunicorn instance (its master and workers), then SIGCONT."""
        window = Window("freeze-instance", self._now(), 0.0,
                        info={"nginx": self.stack.nginx})
        self.windows.append(window)
        group = self.stack.signal_child("gunicorn-1", signal.SIGSTOP)
        time.sleep(FREEZE_S)
        with contextlib.suppress(ProcessLookupError):  # the same group, even if restarted
            os.killpg(group, signal.SIGCONT)
        window.end = self._now()
        fault.note = f"its master and workers frozen {FREEZE_S:.0f} s"
        fault.back_after = round(window.end - window.start, 2)
        self._healthy(fault, time.monotonic() - (self._now() - window.start))

    def receiver_moods(self, fault: Fault) -> None:
        """The shop's receiver down, then answering 500, then cutting its answers' bodies,
        then slow, :data:`RECEIVER_FAULT_S` each; then well again."""
        window = Window("webhook-receiver", self._now(), 0.0)
        self.windows.append(window)
        if self.receiver is None:
            window.not_run = "no receiver (a rehearsal against a deployment)"
            fault.note = "not run: " + window.not_run
            return
        self.receiver.down()
        time.sleep(RECEIVER_FAULT_S)
        self.receiver.up()
        for mode in ("500", "cut", "slow"):  # slow last: its attempts hang the longest
            self.receiver.mode = mode
            time.sleep(RECEIVER_FAULT_S)
        self.receiver.mode = "ok"
        window.end = self._now()
        seen = self.receiver.answered
        fault.note = (f"down, 500 ({seen.get('500', 0)} attempts), cut ({seen.get('cut', 0)}), "
                      f"slow ({seen.get('slow', 0)}), {RECEIVER_FAULT_S} s each")

    def disk_full(self, fault: Fault) -> None:
        """Fill the data disk (the drill's tmpfs) with a file, hold, delete it."""
        window = Window("disk-full", self._now(), 0.0,
                        info={"cluster": bool(self.stack.redis_nodes)})
        self.windows.append(window)
        if self.disk_reason:
            window.not_run = self.disk_reason
            fault.note = "not run: " + self.disk_reason
            return
        filler = self.stack.data / "drill-filler"
        chunk = b"\0" * (1 << 20)
        with filler.open("wb", buffering=0) as out:
            with contextlib.suppress(OSError):  # ENOSPC: full
                # At a disk's pace, not at once: the embedded Valkey's keeper (it looks once
                # a second) switches to everysec ahead of the last MiB, as on a real disk.
                for _ in range(1 << 16):  # bounded: far more than the disk holds
                    out.write(chunk)
                    time.sleep(1 / FILL_MIB_PER_S)
            with contextlib.suppress(OSError):  # the last few KiB too
                while True:
                    out.write(b"\0" * 4096)
        window.start = self._now()  # full from here
        time.sleep(DISK_FULL_S)
        filler.unlink()
        window.end = self._now()
        gave_up = "giving up" in self.stack.log_text()
        window.info.update(running=self.stack.running(), gave_up=gave_up)
        resumed = self._first_answered(window.end, RESUME_BOUND_S)
        window.info["resumed_after"] = resumed
        fault.back_after = resumed
        fault.note = f"full for {DISK_FULL_S:.0f} s" + ("; the supervisor gave up" if gave_up
                                                        else "")
        self._healthy(fault, time.monotonic() - (self._now() - window.end))

    def database_stop(self, fault: Fault) -> None:
        """PostgreSQL: stop the drill's proxy in front of it (connections cut, new ones
        refused), then start it again. SQLite has no server to stop: not run."""
        window = Window("database-stop", self._now(), 0.0)
        self.windows.append(window)
        if self.proxy is None:
            window.not_run = ("SQLite has no server to stop (the hung database holds its "
                              "write lock); run with --database URL for PostgreSQL")
            fault.note = "not run: " + window.not_run
            return
        stop = threading.Event()
        prober = threading.Thread(target=self._probe, args=(stop, window), daemon=True)
        self.proxy.stop()
        prober.start()
        time.sleep(FREEZE_S)
        self.proxy.start_again()
        stop.set()
        prober.join(2 * DATABASE_BOUND_S + 15)
        window.end = self._now()
        fault.back_after = round(window.end - window.start, 2)
        self._healthy(fault, time.monotonic() - (self._now() - window.start))

    def database_hang(self, fault: Fault) -> None:
        """Freeze the database (SQLite: a connection holding the write lock; PostgreSQL: the
        proxy) and, while it hangs, pause the busiest activity, resume it 2 s later and end
        it 2 s after that; continue it; read what the database and the sale say."""
        window = Window("database-hang", self._now(), 0.0)
        self.windows.append(window)
        lock = None
        if self.proxy is not None:
            self.proxy.freeze()
        else:
            lock = WriteLock(self.stack.sqlite_path)
            lock.freeze()
        window.start = self._now()
        stop = threading.Event()
        prober = threading.Thread(target=self._probe, args=(stop, window), daemon=True)
        prober.start()
        callers = []
        for n, what in enumerate(("pause", "resume", "end")):
            thread = threading.Thread(target=self._lever, args=(
                what, window.start + 1.0 + n * LEVER_GAP_S), daemon=True)
            thread.start()
            callers.append(thread)
        time.sleep(max(0.0, window.start + FREEZE_S - self._now()))
        if lock is not None:
            lock.release()
        elif self.proxy is not None:
            self.proxy.thaw()
        window.end = self._now()
        stop.set()
        for thread in callers:
            thread.join(30)
        prober.join(2 * DATABASE_BOUND_S + 15)
        fault.note = "; ".join(f"{lv.what} {lv.status or 'no answer'} in {lv.took:.1f} s"
                               for lv in self.levers)
        fault.back_after = round(window.end - window.start, 2)
        self._healthy(fault, time.monotonic() - (self._now() - window.start))

    def _lever(self, what: str, at: float) -> None:
        time.sleep(max(0.0, at - self._now()))
        client = Client(self.stack.admin_base)
        try:
            sent = self._now()
            started = time.monotonic()
            status, body, _ = client.call(
                "POST", f"/admin/activities/{quote(self.aid)}/{what}", self.stack.admin_token)
            self.levers.append(Lever(what, round(sent, 2), round(time.monotonic() - started, 2),
                                     status, body))
        finally:
            client.close()


# -- what the database and the sale say after the levers ----------------------------------


def epoch_ms(iso: object) -> int | None:
    """An ISO 8601 time of a body as epoch milliseconds (None if not one)."""
    if not isinstance(iso, str):
        return None
    try:
        return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


def settled_state(database_url: str, base: str, aid: str, ends_ms: int | None,
                  timeout: float = 30.0) -> dict[str, Any]:
    """Once the database is back: its row and the sale's view of the activity, read again
    until the database agrees with the last lever (bounded); both."""
    deadline = time.monotonic() + timeout
    client = Client(base)
    try:
        while True:
            row = activity_row(database_url, aid)
            status, view, _ = client.call("GET", f"/seckill/activities/{quote(aid)}", "-")
            agreed = row and not row["paused"] and (ends_ms is None or row["ends_ms"] == ends_ms)
            if agreed or time.monotonic() > deadline:
                return {"database": row, "sale": view if status == 200 else {}}
            time.sleep(1.0)
    finally:
        client.close()


# -- the invariants --------------------------------------------------------------------


def _window(windows: list[Window], kind: str) -> Window | None:
    return next((w for w in windows if w.kind == kind), None)


def _skip(name: str, window: Window | None) -> Invariant | None:
    if window is None:
        return Invariant(name, None, "fault not selected")
    if window.not_run:
        return Invariant(name, None, f"fault not run: {window.not_run}")
    return None


def followed_new_master(windows: list[Window], records: list[Record], aid: str) -> Invariant:
    """Purchases of the frozen master's activity sent once the node timeout and a second had
    passed since the cluster moved its slot to a replica got an answer (the new master's):
    every process followed it. The cluster's own failover takes its node timeout and an
    election (~2-4 s here); a gateway process that kept asking the frozen node afterwards is
    what this catches."""
    name = "a frozen master's activity sells again within node timeout + 1 s of the failover"
    window = _window(windows, "freeze-valkey")
    skipped = _skip(name, window)
    if skipped or window is None:
        return skipped or Invariant(name, None, "")
    if not window.info.get("failover"):
        return Invariant(name, None, "one Valkey, no replica to take over: sales waited "
                                     "for it (the other invariants hold the rest)")
    failover_at = window.info.get("failover_at")
    if failover_at is None:
        return Invariant(name, False, f"no replica took over within the {FREEZE_S:.0f} s "
                                      "freeze (the cluster did not fail over)")
    bound = float(window.info.get("node_timeout", 0.0)) + FOLLOW_S
    after = float(failover_at) + bound
    unanswered = [r for r in records if r.endpoint == "buy" and r.aid == aid
                  and float(failover_at) <= r.at < window.end and _bad_answer(r)]
    late = [r for r in unanswered if r.at >= after]
    took = f"failover {float(failover_at) - window.start:.1f} s after the freeze"
    last = (f"; the last unanswered one sent +{unanswered[-1].at - float(failover_at):.1f} s "
            "after it" if unanswered else "")
    return Invariant(name, not late, (
        f"{took}; {len(late)} purchases sent {bound:.0f} s or more after it got "
        + ", ".join(sorted({f'{r.status} {r.error}'.strip() for r in late})[:3])
        + f" (first at +{late[0].at - float(failover_at):.1f} s)") if late else
        f"{took}; no purchase sent {bound:.0f} s after it went unanswered{last} "
        f"({window.info.get('node')})")


def gets_moved_away(windows: list[Window], records: list[Record]) -> Invariant:
    """No URL request (a GET) sent while an instance was frozen went unanswered: nginx
    moved it to the other instance."""
    name = "GETs moved away from a frozen instance"
    window = _window(windows, "freeze-instance")
    skipped = _skip(name, window)
    if skipped or window is None:
        return skipped or Invariant(name, None, "")
    if not window.info.get("nginx"):
        return Invariant(name, None, "no nginx in front: the one instance is the site")
    sent = [r for r in records if r.endpoint == "url" and window.start <= r.at < window.end]
    bad = [r for r in sent if _bad_answer(r)]
    return Invariant(name, not bad, (
        f"{len(bad)} of {len(sent)} URL requests sent during the freeze got "
        + ", ".join(sorted({f'{r.status} {r.error}'.strip() for r in bad})[:3])) if bad else
        f"{len(sent)} URL requests sent during the freeze, every one answered")


def disk_full_refuses(windows: list[Window], records: list[Record]) -> Invariant:
    """While the data disk is full, purchases are decided or refused 503 ``storage``, never
    an error; the supervisor never gives up; sales resume within a bound of space
    returning."""
    name = "a full disk: 503 storage, nothing gives up, sales resume"
    window = _window(windows, "disk-full")
    skipped = _skip(name, window)
    if skipped or window is None:
        return skipped or Invariant(name, None, "")
    during = [r for r in records if r.endpoint == "buy" and window.start <= r.at < window.end]
    # "durability": a purchase Redis had applied when its append failed: decided, not
    # confirmed on disk, and said so (its status tells; the unknown outcomes are asked).
    # On a cluster whose nodes share the disk, Valkey stops its nodes: a replica that cannot
    # append panics (it must not fall behind its master), then a master that cannot save
    # its cluster configuration exits. A purchase then meets a node that is down or
    # restarting (refused before anything was decided: NotSent, ClusterDownError; the
    # gateway says storage while its data folder is full) or loses its reply to a node that
    # stopped (an unknown outcome, said as such): the unknown-outcome and stored-order
    # invariants hold those to account; this one counts them.
    # A purchase sent while full but answered once space had returned may hear the node the
    # disk stopped is still restarting (no_replica, ...): true, and nothing was decided.
    lost_ok = bool(window.info.get("cluster"))
    lost = [r for r in during if (lost_ok and r.detail in CLUSTER_DISK_ANSWERS)
            or (r.answered >= window.end and r.detail in UNDECIDED_ANSWERS)]
    wrong = [r for r in during if r.detail != "durability" and r not in lost and (
        _bad_answer(r) or (r.status >= 500 and r.status != 503)
        or (r.status == 503 and r.error == "unavailable" and r.detail != "storage"))]
    bad = [f"{len(wrong)} of {len(during)} purchases during it got "
           + ", ".join(sorted({f'{r.status} {r.error} {r.detail}'.strip()
                               for r in wrong})[:3])
           # when, so that a race with the fault's edges can be told from a wrong answer
           + f" (the first sent {wrong[0].at - window.start:+.2f} s into the fault, answered "
             f"{wrong[0].answered - window.end:+.2f} s from its end)"] if wrong else []
    if window.info.get("gave_up") or window.info.get("running") is False:
        bad.append("the supervisor gave up")
    resumed = window.info.get("resumed_after")
    if resumed is None or resumed > RESUME_BOUND_S:
        bad.append(f"no purchase decided within {RESUME_BOUND_S:.0f} s of space returning")
    storage = sum(1 for r in during if r.detail == "storage")
    lost_note = (f", {len(lost)} met nodes the disk stopped: "
                 + ", ".join(f"{n} {d}" for d, n in sorted(
                     Counter(r.detail for r in lost).items())) if lost else "")
    return Invariant(name, not bad, "; ".join(bad) or (
        f"{len(during)} purchases during it ({storage} refused 503 storage{lost_note}, none "
        f"an error); sales resumed {resumed:.1f} s after space returned"))


def database_bounded(windows: list[Window], probes: list[Probe], records: list[Record]
                     ) -> Invariant:
    """While the database is stopped or hung: each route needing it answered within
    :data:`DATABASE_BOUND_S`, 200 or 503 ``database`` (never 500), ``/healthz`` naming it;
    and the sale ran on (purchases decided, none lost)."""
    name = "a database away: bounded 503 database, the sale runs on"
    ran = [w for w in windows if w.kind in ("database-stop", "database-hang") and not w.not_run]
    if not ran:
        chosen = [w for w in windows if w.kind in ("database-stop", "database-hang")]
        return Invariant(name, None, "fault not run: " + "; ".join(w.not_run for w in chosen)
                         if chosen else "fault not selected")
    bad = []
    for p in probes:
        if p.took > DATABASE_BOUND_S or p.status == 0:
            bad.append(f"{p.what} at {p.at:.1f} s took {p.took:.1f} s ({p.status or 'none'})")
        elif p.status >= 500 and (p.status != 503 or "database" not in p.body):
            bad.append(f"{p.what} at {p.at:.1f} s answered {p.status} {p.error} without "
                       "naming the database")
    quiet = [w.kind for w in ran
             if not any(r.endpoint == "buy" and w.start <= r.at < w.end for r in records)]
    if len(quiet) == len(ran):
        return Invariant(name, None, "no purchase was sent while the database was away (the "
                                     "crowd had ended: give --duration more room)")
    for w in ran:
        during = [r for r in records if r.endpoint == "buy" and w.start <= r.at < w.end]
        lost = [r for r in during if _bad_answer(r)]
        if lost:
            bad.append(f"{w.kind}: {len(lost)} of {len(during)} purchases got "
                       + ", ".join(sorted({f'{r.status} {r.error}'.strip() for r in lost})[:3]))
        elif during and not any(r.status < 500 for r in during):
            bad.append(f"{w.kind}: no purchase decided while it was away")
    return Invariant(name, not bad, "; ".join(bad[:5]) or (
        f"{len(probes)} probes answered within {DATABASE_BOUND_S:.0f} s; purchases decided "
        f"throughout ({', '.join(w.kind for w in ran)})"))


def levers_hold(windows: list[Window], levers: list[Lever], settled: dict[str, Any],
                stored: list[StoredRow] | None, decided_ms: dict[str, int]) -> Invariant:
    """Levers sent while the database hung: each answered within :data:`LEVER_BOUND_S` (200,
    or 503 ``unavailable`` saying what was applied); once it is back, the later one won in
    the sale and in the database (not paused; ``ends_at`` as ``end`` answered), and no
    order of the activity was decided after the answered ``ends_at``."""
    name = "levers while the database hangs: bounded, the later wins, end holds"
    window = _window(windows, "database-hang")
    skipped = _skip(name, window)
    if skipped or window is None:
        return skipped or Invariant(name, None, "")
    bad = []
    for lv in levers:
        if lv.took > LEVER_BOUND_S or not lv.status:
            bad.append(f"{lv.what} took {lv.took:.1f} s ({lv.status or 'no answer'})")
        elif lv.status not in (200, 503) or (lv.status == 503
                                             and lv.body.get("error") != "unavailable"):
            bad.append(f"{lv.what} answered {lv.status} {lv.body.get('error', '')}")
    if {lv.what for lv in levers} != {"pause", "resume", "end"}:
        bad.append("not every lever was sent")
    end = next((lv for lv in levers if lv.what == "end"), None)
    ends_ms = epoch_ms(end.body.get("ends_at")) if end else None
    row, view = settled.get("database") or {}, settled.get("sale") or {}
    if row.get("paused"):
        bad.append("the database still says paused after resume")
    if ends_ms is None:
        bad.append(f"end answered {end.status if end else 'nothing'} without ends_at")
    else:
        if row.get("ends_ms") != ends_ms:
            bad.append(f"the database's ends_ms {row.get('ends_ms')} != the answered {ends_ms}")
        if epoch_ms(view.get("ends_at")) != ends_ms or view.get("state") != "ended":
            bad.append(f"the sale says {view.get('state')} until {view.get('ends_at')}")
        late = sorted(oid for oid, ms in decided_ms.items() if ms > ends_ms)
        if late:
            bad.append(f"{len(late)} orders decided after the answered ends_at, e.g. {late[0]}")
    if stored is None:
        bad.append("orders not readable")
    return Invariant(name, not bad, "; ".join(bad[:5]) or (
        ", ".join(f"{lv.what} {lv.status} in {lv.took:.1f} s" for lv in levers)
        + f"; afterwards not paused, ended at the answered moment, {len(decided_ms)} orders "
          "all decided before it"))
