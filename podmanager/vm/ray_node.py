"""The few facts of a Ray node that the controller's head and a VM's join both need: how a
host finds the head, the object store every node starts with, reachability (free ports:
`core/local_ports.py`)."""

from __future__ import annotations

import socket

OBJECT_STORE_BYTES = 80 * 1000 * 1000  # Ray's minimum is 75 MiB; the default claims GBs of /dev/shm

# The node metadata entry that tells a host where the head is (no secrets in it).
HEAD_METADATA_KEY = "podmanager-head"


def reachable(address: str, timeout_s: float = 1.0) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return True
    except OSError:
        return False
