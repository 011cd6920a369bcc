"""Free ports for the embedded servers: one for a single server (:func:`free_port`), and a
cluster's set (:func:`free_cluster_ports`), each node's with its cluster bus port free too."""

from __future__ import annotations

import random
import socket
from pathlib import Path

from seckill.ops.embedded import free_port

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
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 0
    # Node ports below 20000 and bus ports from 20000: one node's port is never another's bus
    # port (drawn from one range, they could be: that node then failed to bind).
    top = min(low - BUS_PORT_OFFSET, 2 * BUS_PORT_OFFSET)
    ports: list[int] = []
    taken: set[int] = set()
    for _ in range(count * 50):
        port = random.randrange(BUS_PORT_OFFSET, top) if top > 15000 else free_port(host)
        pair = {port, port + BUS_PORT_OFFSET}
        if not pair & taken and port + BUS_PORT_OFFSET <= 65535 and all(
            bindable(host, each) for each in pair
        ):
            taken |= pair
            ports.append(port)
            if len(ports) == count:
                return sorted(ports)
    raise OSError(f"found no {count} free ports with free cluster bus ports on {host}")
