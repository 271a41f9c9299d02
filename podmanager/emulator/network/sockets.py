"""A socket opened inside a named network namespace, from this process: the calling thread
enters the namespace just long enough to make the socket (a socket stays in the namespace it
was made in), then returns. Linux only (setns(2)); Python 3.11 has no os.setns, so ctypes."""

from __future__ import annotations

import ctypes
import os
import socket
from contextlib import contextmanager
from typing import Iterator

CLONE_NEWNET = 0x40000000
NETNS_DIR = "/run/netns"  # where `ip netns add` mounts its namespaces


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"setns: {os.strerror(error)}")


@contextmanager
def inside(namespace: str) -> Iterator[None]:
    """This thread in `namespace` for the block's length."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(f"{NETNS_DIR}/{namespace}", os.O_RDONLY)
        try:
            _setns(target)
            try:
                yield
            finally:
                _setns(own)
        finally:
            os.close(target)
    finally:
        os.close(own)


def socket_in(namespace: str, kind: int = socket.SOCK_STREAM) -> socket.socket:
    """An IPv4 socket of `kind` in `namespace`."""
    with inside(namespace):
        return socket.socket(socket.AF_INET, kind)
