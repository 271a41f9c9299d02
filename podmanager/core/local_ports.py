"""This machine's loopback address and its free ports: what the controller's head, a VM's Ray
node, a dry run's emulator and the laptop's dry-run channel all pick their ports with."""

from __future__ import annotations

import contextlib
import ipaddress
import socket

LOOPBACK_IP = "127.0.0.1"


def is_loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def free_port(host: str = LOOPBACK_IP) -> int:
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
