"""What is known about one host of a cluster, without Ray: `HostInfo` and its states.

Kept apart from fleet.py (which asks Ray) so that `status` can read the monitor's
snapshot (snapshot.py) without importing Ray.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

# Host states, from best to worst.
HEALTHY = "healthy"
UNHEALTHY = "unhealthy"  # agent answers, but its probe found a problem
JOINING = "joining"  # no Ray node for this host yet, or the slice is not placed yet
UNRESPONSIVE = "unresponsive"  # alive as far as Ray knows, no answer in time
UNREACHABLE = "unreachable"  # ActorUnavailableError: the node stopped answering, not yet declared dead
DEAD = "dead"  # ActorDiedError, agent gone, or its Ray node declared dead


@dataclass(frozen=True)
class HostInfo:
    slice_index: int
    node_name: str
    worker_id: int
    ip: str | None
    chips: int
    healthy: bool
    last_heartbeat: float | None  # unix time of the last answered probe
    ray_node_id: str | None
    detail: str
    state: str = JOINING


def mark_vanished(infos: list[HostInfo], gone: set[tuple[str, int]]) -> list[HostInfo]:
    """Hosts whose machine is gone, (node name, worker) in `gone`, are dead, whatever Ray says yet."""
    return [
        dataclasses.replace(h, healthy=False, state=DEAD, detail=f"simulated VM is gone; Ray: {h.detail}")
        if (h.node_name, h.worker_id) in gone else h
        for h in infos
    ]
