"""Classify why an attempt ended (pure): preemption, program failure, hang, or infrastructure;
and whether an attempt whose every process exited 0 finished the run (`finished`).

The cause decides which budget pays and what recovery does: a preemption replaces the
lost slices, a program failure or a hang relaunches on the same slices, an
infrastructure failure replaces the slice whose host misbehaved. A JAX peer aborting
because another host died (exit 134, or killed by our own stop) is part of that other
failure, not a second one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from podmanager.cloud.base import DEAD_STATES, NodeState
from podmanager.core.records import host_label
from podmanager.runtime.contract import EXIT_PREEMPTED

_PEER_EXITS = frozenset({134, -6, 143, -15, -9, 137})  # aborted by JAX, or stopped by us


class Cause(str, Enum):
    PREEMPTION = "preemption"
    PROGRAM = "program-failure"
    HANG = "hang"
    INFRASTRUCTURE = "infrastructure"
    # The run's supervisor was lost (its process, or the Ray head with a controller that crashed
    # or rebooted) and started again: no budget pays for it, the run carries on from its record.
    SUPERVISOR = "supervisor-restart"


@dataclass(frozen=True)
class HostOutcome:
    slice: int
    worker_id: int
    exit_code: int | None
    lost: str | None = None  # why the host's agent could not be reached, if it could not
    node_dead: bool = False  # Ray reports the host's node as dead (not just slow to answer)


@dataclass(frozen=True)
class Observation:
    """What the supervisor saw when an attempt ended."""

    hosts: tuple[HostOutcome, ...]
    slice_states: dict[int, NodeState | None]  # None: the slice's node is gone
    notices: frozenset[int] = frozenset()  # slices with a preemption or maintenance notice
    hung: bool = False
    host_problems: dict[tuple[int, int], str] = field(default_factory=dict)  # probe failures by (slice, worker)
    # Slices hidden or unhealthy (cloud/base.py: Decision.WAIT_BOUNDED) for longer than the
    # bounded wait, with how the cloud reports them, e.g. 'READY (TIMEOUT)'.
    overdue: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Incident:
    cause: Cause
    slices: frozenset[int]  # slices to replace (empty: relaunch on the same slices)
    detail: str
    host: tuple[int, int] | None = None  # the host that failed first, for program and infra failures


def classify(seen: Observation) -> Incident:
    lost_slices = {i for i, state in seen.slice_states.items() if state is None or state in DEAD_STATES}
    if lost_slices:
        states = ", ".join(f"slice {i}: {seen.slice_states[i].value if seen.slice_states[i] else 'gone'}"
                           for i in sorted(lost_slices))
        return Incident(Cause.PREEMPTION, frozenset(lost_slices), f"cloud reports {states}")
    if seen.overdue:
        # Not a preemption (no budget of the spot kind pays), but the slice is not coming back soon.
        described = ", ".join(f"slice {i}: {condition}" for i, condition in sorted(seen.overdue.items()))
        return Incident(Cause.INFRASTRUCTURE, frozenset(seen.overdue), f"cloud reports {described} for too long")
    dead_nodes = {h.slice for h in seen.hosts if h.node_dead}
    if dead_nodes:
        return Incident(Cause.PREEMPTION, frozenset(dead_nodes),
                        f"host node(s) of slice(s) {sorted(dead_nodes)} died")
    # A notice on one slice stops the whole gang, and every host's program exits 75 at its
    # checkpoint: the exits say "stopped for a notice", the notices say whose. Exits alone
    # count only when no notice was seen (the program saw one the watch did not).
    noticed = set(seen.notices) or {h.slice for h in seen.hosts if h.exit_code == EXIT_PREEMPTED}
    if noticed:
        # The VMs are about to go: replace the slices rather than relaunch on them.
        return Incident(Cause.PREEMPTION, frozenset(noticed), f"preemption notice for slice(s) {sorted(noticed)}")
    if seen.hung:
        return Incident(Cause.HANG, frozenset(), "no training step within the hang timeout")
    if seen.host_problems:
        (slice_index, worker), problem = sorted(seen.host_problems.items())[0]
        return Incident(Cause.INFRASTRUCTURE, frozenset({slice_index}), problem, (slice_index, worker))
    unreachable = [h for h in seen.hosts if h.lost]
    if unreachable:
        first = unreachable[0]
        return Incident(Cause.INFRASTRUCTURE, frozenset({first.slice}),
                        f"agent of {host_label(first.slice, first.worker_id)} lost: {first.lost}",
                        (first.slice, first.worker_id))
    failed = [h for h in seen.hosts if h.exit_code not in (None, 0)]
    own = [h for h in failed if h.exit_code not in _PEER_EXITS] or failed
    if own:
        first = own[0]
        return Incident(Cause.PROGRAM, frozenset(), f"{host_label(first.slice, first.worker_id)} exited with code "
                        f"{first.exit_code}", (first.slice, first.worker_id))
    return Incident(Cause.INFRASTRUCTURE, frozenset(), "the attempt ended without a clear cause")


@dataclass(frozen=True)
class CleanExit:
    """An attempt whose every process exited 0, as the supervisor saw it end."""

    asked_to_stop: bool  # podmanager had sent the program SIGTERM (a notice's) before it exited
    said_done: bool = False  # its progress said it has finished its work (report_progress(done=True))
    step: int | None = None  # the step every host reached
    total_steps: int | None = None  # the step count it declared (report_progress(total_steps=N))


def finished(ended: CleanExit) -> bool:
    """Whether an exit 0 everywhere is the run's end. After podmanager asked the program to stop
    for a notice, its exit is a stop for the notice whatever its code (JAX's own examples save a
    checkpoint on SIGTERM and exit 0): the run resumes on the replacement, as after exit 75,
    unless the program said it was done or reached the step count it declared."""
    if not ended.asked_to_stop or ended.said_done:
        return True
    return ended.total_steps is not None and ended.step is not None and ended.step >= ended.total_steps
