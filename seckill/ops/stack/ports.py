"""Free ports for the embedded servers: one for a single server (:func:`free_port`), a
cluster's set (:func:`free_cluster_ports`), each node's with its cluster bus port free too, and
one for a listener started a while after it is chosen (:func:`free_listen_port`). Each draws
only from this process's slice of the ports (``SECKILL_PORT_SLICE``, for several runs on one
machine drawing at once: :func:`seckill.config.port_slice`)."""

from __future__ import annotations

import random
import socket
from collections.abc import Collection
from pathlib import Path

from seckill.config import port_slice
from seckill.ops.stack.embedded import free_port, in_slice

BUS_PORT_OFFSET = 10000  # a node's cluster bus listens on its port + 10000


def bindable(host: str, port: int) -> bool:
    """Whether ``port`` on ``host`` can be bound now, with SO_REUSEADDR as valkey-server binds."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as valkey-server does
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def free_cluster_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports free on ``host``, each with its cluster bus port (+10000), none
    of them another's, all below the kernel's ephemeral range when it leaves room: then a port
    taken with :func:`free_port` (e.g. a gunicorn instance's) is never a node's not started yet."""
    low = _ephemeral_low()
    # Node ports below 20000 and bus ports from 20000: one node's port is never another's bus
    # port (drawn from one range, they could be: that node then failed to bind).
    top = min(low - BUS_PORT_OFFSET, 2 * BUS_PORT_OFFSET)
    ports: list[int] = []
    taken: set[int] = set()
    for _ in range(count * 50):
        port = _draw(BUS_PORT_OFFSET, top) if top > 15000 else free_port(host)
        pair = {port, port + BUS_PORT_OFFSET}
        if not pair & taken and port + BUS_PORT_OFFSET <= 65535 and all(
            bindable(host, each) for each in pair
        ):
            taken |= pair
            ports.append(port)
            if len(ports) == count:
                return sorted(ports)
    raise OSError(f"found no {count} free ports with free cluster bus ports on {host}")


def _draw(start: int, stop: int) -> int:
    """A random port of ``start`` to ``stop`` (not included) in this process's slice."""
    index, count = port_slice()
    for _ in range(100 * count):
        port = random.randrange(start, stop)
        if in_slice(port, index, count):
            return port
    raise OSError(f"no port of {start}-{stop} drawn in slice {index}/{count}")


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


LISTEN_PORTS_FROM = 3 * BUS_PORT_OFFSET  # above the cluster's node and bus ports
# Every port this process has handed out: none is handed out twice (two listeners of one test
# or one stack were once given the same port between a draw and the first one's bind).
_HANDED_OUT: set[int] = set()


def free_listen_port(host: str = "127.0.0.1", avoid: Collection[int] = ()) -> int:
    """A port free on ``host`` for a listener that binds seconds later (a gunicorn instance
    started after others, the exporter): below the kernel's ephemeral range when it leaves
    room, so that no outgoing connection made meanwhile (they draw their local port from that
    range) can take it, as one did a :func:`free_port` port before its exporter bound it.
    ``avoid``: ports already chosen for listeners not started yet (this process's earlier
    answers are avoided too)."""
    low = _ephemeral_low()
    if low - LISTEN_PORTS_FROM >= 1000:
        for _ in range(100):
            port = _draw(LISTEN_PORTS_FROM, low)
            if port not in avoid and port not in _HANDED_OUT and bindable(host, port):
                _HANDED_OUT.add(port)
                return port
    while True:
        port = free_port(host)
        if port not in avoid and port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def backend_ports(count: int, taken: Collection[int]) -> tuple[list[int], int]:
    """``seckill up``'s ports behind nginx: ``count`` gunicorn instances' and the exporter's,
    each free, distinct, and none of ``taken`` (the public and operator ports, which nginx
    binds only after them: free when these are drawn, one was once drawn for an instance and
    nginx then found it in use)."""
    ports: list[int] = []
    for _ in range(count + 1):
        ports.append(free_listen_port(avoid=[*taken, *ports]))
    return ports[:-1], ports[-1]
