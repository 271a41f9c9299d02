"""Fault injection for dry-run clusters: what `podmanager sim ...` does, as functions."""

from __future__ import annotations

import re
import threading
from typing import TYPE_CHECKING

from podmanager.core.errors import SpecError
from podmanager.core.records import host_label

if TYPE_CHECKING:  # kept light: the CLI imports this module on every start
    from podmanager.operations.cluster_runtime import ClusterRuntime


def parse_duration(text: str, flag: str) -> float:
    """'10', '10s', '1.5m' -> seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|m|)\s*", text)
    if not match:
        raise SpecError(f"{flag}: {text!r} is not a duration; use seconds like 10 or 10s, or minutes like 1m")
    return float(match.group(1)) * (60 if match.group(2) == "m" else 1)


def preempt(cluster: "ClusterRuntime", slice_index: int, notice_s: float = 0.0) -> str:
    """Preempt the node that holds `slice_index` now, or after a notice; returns its name."""
    sim = cluster.simulator
    for node in cluster.observe().nodes:
        if node.slice_index == slice_index:
            sim.preempt(node.zone, node.name, notice_s=notice_s)
            cluster.record("fault_injected", f"simulated preemption of {node.name}"
                            + (f" with {notice_s:.0f}s notice" if notice_s else ""), slice_index)
            return node.name
    raise SpecError(f"--slice: cluster {cluster.name} has no node for slice {slice_index}")


def fail_create(cluster: "ClusterRuntime", kind: str, zone: str | None, times: int) -> str:
    """Make the next `times` creates fail: capacity, reservation, preempt-while-creating or quota."""
    sim = cluster.simulator
    zone = zone or cluster.spec.zones[0]
    if kind == "quota":
        sim.inject_quota(times=times)
    elif kind in ("capacity", "reservation", "preempt-while-creating"):
        sim.inject_create_fault(zone, kind, times)
    else:
        raise SpecError(f"--kind: {kind!r} is not one of capacity, reservation, preempt-while-creating, quota")
    cluster.record("fault_injected", f"the next {times} create(s) in {zone} fail with {kind}")
    return zone


def hang(cluster: "ClusterRuntime", slice_index: int, worker_id: int) -> None:
    """Freeze (SIGSTOP) the workload processes on one host: they stop making steps, and
    their peers block in the next collective, exactly like a hung program."""
    import signal

    import ray

    cluster.simulator  # dry-run clusters only
    agent = cluster.hosts.controller.agent(slice_index, worker_id) if cluster.hosts else None
    if agent is None:
        raise SpecError(f"--host: {host_label(slice_index, worker_id)} of {cluster.name} has no live agent")
    ray.get(agent.signal_workload.remote(None, signal.SIGSTOP), timeout=30)
    cluster.record("fault_injected", f"simulated hang of the workload on {host_label(slice_index, worker_id)}",
                    slice_index)


def arm_hangs(cluster: "ClusterRuntime") -> list[threading.Timer]:
    """Timers for the spec's scripted `hang` faults (worker 0 of the slice, `after_s` into
    the run); the caller cancels them when the run ends."""
    timers = []
    for fault in cluster.spec.simulation.faults:
        if fault.kind == "hang" and fault.slice is not None:
            timer = threading.Timer(fault.after_s, hang, args=(cluster, fault.slice, 0))
            timer.daemon = True
            timer.start()
            timers.append(timer)
    return timers
