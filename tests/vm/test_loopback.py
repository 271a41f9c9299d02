"""vm/loopback.py: which addresses are this machine's own."""

from __future__ import annotations

from podmanager.vm import loopback


def test_loopback_detection():
    assert loopback.is_loopback("127.0.0.1:6379") and loopback.is_loopback("localhost:1")
    assert not loopback.is_loopback("10.0.0.2:6379")
