"""Waiting on a service, whether its records are on this machine (`api/service_handle.py`) or on
a controller VM reached through the channel (`remote_service.py`): until its replicas are
ready, or following its summary until it stops serving."""

from __future__ import annotations

import time
from typing import Any, Callable

from podmanager.channel.service_summary import ReplicaState
from podmanager.core.clock import poll_until
from podmanager.core.errors import PodmanagerError
from podmanager.core.run_results import SERVING

REPLICA_ENDS = ("failed", "cancelled", "succeeded", "missing")  # a replica state that is its run's end


def wait_for_replicas(service_id: str, read: Callable[[], list[ReplicaState]], replicas: int, *,
                      timeout_s: float, interval_s: float) -> list[ReplicaState]:
    """`read()` until `replicas` are ready; a replica whose run ended ends the wait with its
    state. For a service here and one behind a controller VM alike."""
    def ready() -> list[ReplicaState] | None:
        states = read()
        ended = [r for r in states if r.state in REPLICA_ENDS]
        if ended:
            raise PodmanagerError(f"service {service_id}: replica {ended[0].replica} ({ended[0].run_id}) "
                                  f"is {ended[0].state}", hint=f"See 'podmanager logs --run {ended[0].run_id}'.")
        return states if sum(r.state == "ready" for r in states) >= replicas else None

    return poll_until(ready, timeout_s=timeout_s, interval_s=interval_s,
                      what=f"{replicas} replica(s) of {service_id} to be ready")


def follow_summaries(summary: Callable[[], dict[str, Any]], on_summary: Callable[[dict[str, Any]], None],
                     every_s: float) -> dict[str, Any]:
    """`on_summary(summary())` every `every_s` until the service is no longer serving; the last one."""
    while True:
        found = summary()
        on_summary(found)
        if found["status"] != SERVING:
            return found
        time.sleep(every_s)
