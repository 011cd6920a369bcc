"""Free ports by slice (``SECKILL_PORT_SLICE``): parallel test workers, or two stacks started
side by side, never draw the same port; unset, every port is drawn as before."""

from __future__ import annotations

import pytest

from seckill.config import ConfigError, port_slice
from seckill.ops.stack import ports
from seckill.ops.stack.embedded import free_port


def test_the_slice_is_read_as_n_of_m_and_defaults_to_every_port() -> None:
    assert port_slice({}) == (0, 1)
    assert port_slice({"SECKILL_PORT_SLICE": "1/2"}) == (1, 2)
    assert port_slice({"SECKILL_PORT_SLICE": "3/4"}) == (3, 4)
    assert port_slice({"SECKILL_PORT_SLICE": "7/8"}) == (7, 8)


@pytest.mark.parametrize("raw", ["2/2", "1/3", "x/2", "1", "-1/2", "1/0", "0/7", "0/16"])
def test_a_slice_that_is_not_n_below_m_dividing_10000_is_refused(raw: str) -> None:
    with pytest.raises(ConfigError, match="SECKILL_PORT_SLICE"):
        port_slice({"SECKILL_PORT_SLICE": raw})


@pytest.mark.parametrize("index", [0, 1, 2, 3])
def test_every_kind_of_draw_stays_in_its_slice(index: int,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SECKILL_PORT_SLICE", f"{index}/4")
    drawn = [free_port() for _ in range(20)] + [ports.free_listen_port() for _ in range(20)]
    nodes = ports.free_cluster_ports(6)
    buses = [p + ports.BUS_PORT_OFFSET for p in nodes]
    assert {(p // 2) % 4 for p in drawn + nodes + buses} == {index}
    assert len(set(nodes)) == 6


def test_two_slices_draw_disjoint_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    found: dict[int, set[int]] = {}
    for index in (0, 1):
        monkeypatch.setenv("SECKILL_PORT_SLICE", f"{index}/2")
        found[index] = ({ports.free_listen_port() for _ in range(50)}
                        | set(ports.free_cluster_ports(6)) | {free_port() for _ in range(20)})
    assert not found[0] & found[1]


def test_up_never_puts_an_instance_on_its_own_public_or_operator_port(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``seckill up`` draws its instances' ports before nginx binds the public and operator
    ports: a CI run once gave gunicorn-1 the public port, and nginx could not bind it. Here
    every port of the listeners' range is "taken" but four of this slice's: each draw must
    still stay off them."""
    monkeypatch.setenv("SECKILL_PORT_SLICE", "0/2")
    low = ports._ephemeral_low()
    candidates = [p for p in range(ports.LISTEN_PORTS_FROM, low) if (p // 2) % 2 == 0]
    taken = set(candidates[4:])
    for _ in range(20):
        instances, exporter = ports.backend_ports(3, taken)
        assert not (set(instances) | {exporter}) & taken
        assert len(set(instances) | {exporter}) == 4
