"""The few facts of a Ray node that the controller's head and a VM's join both need: how a
host finds the head, the object store every node starts with, free ports, reachability."""

from __future__ import annotations

import contextlib
import socket

OBJECT_STORE_BYTES = 80 * 1000 * 1000  # Ray's minimum is 75 MiB; the default claims GBs of /dev/shm

# The node metadata entry that tells a host where the head is (no secrets in it).
HEAD_METADATA_KEY = "podmanager-head"


def free_port(host: str = "127.0.0.1") -> int:
    return free_ports(host)[0]


def free_ports(*hosts: str, avoid: tuple[int, ...] = ()) -> list[int]:
    """A free port on each host, all different and none in `avoid`. Each probe stays bound
    until all are chosen: probes on different addresses (127.0.0.1 and all interfaces) closed
    one by one can be handed the same port, and Ray refuses a port given to two components."""
    chosen: list[int] = []
    with contextlib.ExitStack() as probes:
        for host in hosts:
            while True:
                probe = probes.enter_context(socket.socket())
                probe.bind((host, 0))
                port = probe.getsockname()[1]
                if port not in avoid and port not in chosen:
                    break
            chosen.append(port)
    return chosen


def reachable(address: str, timeout_s: float = 1.0) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return True
    except OSError:
        return False
