"""A dry run's hang: the workload on one host frozen (SIGSTOP), now (`podmanager sim hang`)
or `after_s` into a run (the spec's scripted `hang` faults, armed by the run's supervisor)."""

from __future__ import annotations

import signal
import threading
from typing import TYPE_CHECKING

from podmanager.core.errors import SpecError
from podmanager.core.events import EventKind
from podmanager.core.records import host_label

if TYPE_CHECKING:  # the CLI imports this through api/simulation.py and loads no pydantic on start
    from podmanager.cluster.cluster_runtime import ClusterRuntime


def hang(cluster: ClusterRuntime, slice_index: int, worker_id: int) -> None:
    """Freeze (SIGSTOP) the workload processes on one host: they stop making steps, and
    their peers block in the next collective, exactly like a hung program."""
    import ray

    cluster.simulator  # dry-run clusters only
    agent = cluster.hosts.agent(slice_index, worker_id) if cluster.hosts else None
    if agent is None:
        raise SpecError(f"--host: {host_label(slice_index, worker_id)} of {cluster.name} has no live agent")
    ray.get(agent.signal_workload.remote(None, signal.SIGSTOP), timeout=30)
    cluster.record(EventKind.FAULT_INJECTED, f"simulated hang of the workload on {host_label(slice_index, worker_id)}",
                    slice_index)


def arm_hangs(cluster: ClusterRuntime) -> list[threading.Timer]:
    """Timers for the spec's scripted `hang` faults (`after_s` into the run); the caller
    cancels them when the run ends."""
    from podmanager.core.faults import (
        HangFault,  # pydantic's models load only for a dry run's faults
    )

    timers = []
    for fault in cluster.spec.simulation.faults:
        if isinstance(fault, HangFault):
            timer = threading.Timer(fault.after_s, hang, args=(cluster, fault.slice, fault.worker))
            timer.daemon = True
            timer.start()
            timers.append(timer)
    return timers
