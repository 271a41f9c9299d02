"""core/local_ports.py: which addresses are this machine's own, and the free ports a Ray node or a
dry run's channel is started on, all different."""

from __future__ import annotations

from podmanager.core import local_ports


def test_the_heads_ports_are_all_different_whatever_the_kernel_hands_out(monkeypatch):
    # Probes on different addresses, each closed before the next, may be handed one port twice
    # (seen: the dashboard's and the dashboard agent's), and Ray then refuses to start.
    handed = iter([40001, 40001, 6379, 40002, 40003])

    class Probe:
        def __init__(self) -> None:
            self.port = 0

        def __enter__(self):  # type: ignore[no-untyped-def]
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def bind(self, address: tuple[str, int]) -> None:
            self.port = next(handed)

        def getsockname(self) -> tuple[str, int]:
            return ("127.0.0.1", self.port)

    monkeypatch.setattr(local_ports.socket, "socket", Probe)
    assert local_ports.free_ports("127.0.0.1", "", "127.0.0.1", avoid=(6379,)) == [40001, 40002, 40003]


def test_free_ports_hold_their_probes_until_every_port_is_chosen():
    ports = local_ports.free_ports("127.0.0.1", "", "127.0.0.1", "")
    assert len(set(ports)) == 4


def test_loopback_detection():
    assert local_ports.is_loopback("127.0.0.1:6379") and local_ports.is_loopback("localhost:1")
    assert not local_ports.is_loopback("10.0.0.2:6379")
