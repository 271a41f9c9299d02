"""A project's emulator serving its gRPC API and its REST routes, not saved to disk, for the
emulator's own tests that call it as Google's clients do."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from podmanager.emulator.server import Emulator


@contextmanager
def served_emulator(project: str) -> Iterator[Emulator]:
    """The emulator of `project`, stopped on leaving."""
    served = Emulator(project, persist=False)
    served.serve_rest()
    served.start()
    try:
        yield served
    finally:
        served.stop()


# The cluster whose Compute Engine VMs the instance tests make: they insert and delete in 0.3 s,
# not Google Cloud's tens of seconds (the rulebook's, which the waits' own tests keep).
QUICK_VMS_CLUSTER = "c"


@contextmanager
def compute_emulator(project: str, *, grpc: bool = False, network: str = "loopback") -> Iterator[Emulator]:
    """The emulator of `project` serving its REST routes (and gRPC with `grpc`, its port as
    `grpc_port`), cluster `QUICK_VMS_CLUSTER`'s VMs quick; stopped on leaving."""
    served = Emulator(project, persist=False, network=network)
    served.sim.configure_cluster(QUICK_VMS_CLUSTER, 0.5, 0.1, instance_create_latency_s=0.3,
                                 instance_delete_latency_s=0.3)
    served.serve_rest()
    if grpc:
        served.grpc_port = served.start()
    try:
        yield served
    finally:
        served.stop()
