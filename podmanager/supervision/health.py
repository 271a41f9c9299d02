"""The health monitor of a running attempt: each check on its own interval.

- cloud: the state of every slice the run uses (PREEMPTED, TERMINATED, gone) and
  preemption notices — seconds, not the 10-60 s polls of other tools; a slice hidden or
  unhealthy (cloud/base.py's bounded wait) is waited for as `up` waits for it, then lost;
- progress: the step the program last reported; no new step for `hang_timeout_s`
  (counted from the first step, so a long compile is not a hang) is a hang;
- hosts: an exit, or an agent that cannot be reached, is found by the attempt's own
  polling (`gang.Gang.poll`): a long poll each agent answers at once when its process
  exits, looked at every quarter second.

`check()` returns a reason to end the attempt, or None; `observation()` gives the
classifier what was seen. The clock is injected so the checks are tested without waiting.
"""

from __future__ import annotations

import math
import signal
from dataclasses import dataclass, field
from typing import Any, Callable

from podmanager.attempts.gang import Gang
from podmanager.attempts.progress import combine
from podmanager.cloud import errors as cloud_errors
from podmanager.cloud.base import (
    BOUNDED_WAIT_S,
    DEAD_STATES,
    Decision,
    Node,
    NodeState,
    TpuCloud,
    condition,
    decide,
)
from podmanager.core.clock import Clock, RealClock
from podmanager.core.events import EventKind
from podmanager.core.records import SliceRef
from podmanager.supervision.classify import CleanExit, HostOutcome, Observation


@dataclass
class _Watch:
    interval_s: float
    last: float = float("-inf")

    def due(self, now: float) -> bool:
        if now - self.last >= self.interval_s:
            self.last = now
            return True
        return False


@dataclass
class _SlotWatch:
    """Due once per slot of `interval_s` on the clock (`slot`: floor(now / interval_s)), so the
    checks of every run on a cluster fall in the same slots and can share one listing."""

    interval_s: float
    slot: int | None = None

    def due(self, now: float) -> bool:
        slot = math.floor(now / self.interval_s)
        if slot != self.slot:
            self.slot = slot
            return True
        return False


@dataclass
class HealthMonitor:
    cloud: TpuCloud
    slices: list[SliceRef]
    gang: Gang
    interval_s: float = 1.0
    hang_timeout_s: float = 600.0
    clock: Clock = field(default_factory=RealClock)
    on_event: Callable[..., Any] | None = None
    # (zone, slot) -> the zone's nodes as listed in that slot: the cluster's listing shared by
    # all its runs' supervisors (cluster/shared_listing.py); None: list the zone every time.
    list_zone: Callable[[str, int], list[Node]] | None = None
    slice_states: dict[int, NodeState | None] = field(default_factory=dict)
    notices: set[int] = field(default_factory=set)
    hung: bool = False
    last_healthy_check: float | None = None  # the last cloud check that found every slice fine
    bounded_wait_s: float = BOUNDED_WAIT_S  # a hidden or unhealthy slice is waited for this long
    unwell_since: dict[int, float] = field(default_factory=dict)  # slice -> first seen hidden or unhealthy
    overdue: dict[int, str] = field(default_factory=dict)  # slice -> its condition, once past the wait
    _best_step: float | None = None
    _step_time: float | None = None

    def __post_init__(self) -> None:
        self._cloud_watch = _SlotWatch(self.interval_s)
        self._progress_watch = _Watch(min(self.interval_s, 1.0))

    def check(self) -> str | None:
        now = self.clock.now()
        reason = None
        # The first check lists on its own: a listing shared in this slot may be older than this
        # attempt (taken before a replacement that finished within the same second).
        first = self._cloud_watch.slot is None
        if self._cloud_watch.due(now):
            reason = self._check_cloud(None if first else self._cloud_watch.slot)
        if reason is None and self._progress_watch.due(now):
            reason = self._check_progress(now)
        return reason

    def _check_cloud(self, slot: int | None = None) -> str | None:
        """`slot`: the health slot this check is for (a listing taken in it may be shared);
        None: list afresh."""
        by_zone: dict[str, dict[str, Node]] = {}
        for zone in {s.zone for s in self.slices}:
            try:
                listed = (self.list_zone(zone, slot) if self.list_zone is not None and slot is not None
                          else self.cloud.list_nodes(zone))
                by_zone[zone] = {n.name: n for n in listed}
            except cloud_errors.TransientError:
                return None  # the API's trouble is not the run's: look again next interval
        lost = []
        for ref in self.slices:  # every slice, every pass: two slices lost together are one incident
            node = by_zone[ref.zone].get(ref.node_name)
            state = node.state if node else None
            self.slice_states[ref.index] = state
            if state is None or state in DEAD_STATES:
                lost.append(f"slice {ref.index} ({ref.node_name}) is {state.value if state else 'gone'}")
            elif self._unwell_too_long(ref, node):
                lost.append(f"slice {ref.index} ({ref.node_name}) has been {self.overdue[ref.index]} for "
                            f"{self.bounded_wait_s:.0f}s")
        if lost:
            return "; ".join(lost)
        for ref in self.slices:
            # The Cloud TPU API announces nothing ahead: each VM's metadata server does, and
            # the host agents watch it (vm/notices.py).
            if ref.index not in self.notices and self.gang.any_notice(ref.index):
                self.notices.add(ref.index)
                self._event(EventKind.PREEMPTION_NOTICE, f"preemption notice for slice {ref.index}; asking the program "
                            "to checkpoint (SIGTERM)", ref.index)
                self.gang.signal(signal.SIGTERM)
        self.last_healthy_check = self.clock.now()
        return None


    def _check_progress(self, now: float) -> str | None:
        latest = combine(self.gang.hosts).latest
        if latest is None:
            return None  # not started stepping yet: compiling or restoring, not hung
        step = latest.step  # the slowest host's: one stuck host stalls the collective
        if self._best_step is None or step > self._best_step:
            self._best_step, self._step_time = step, now
            return None
        if now - (self._step_time or now) > self.hang_timeout_s:
            self.hung = True
            return f"no step after {step:.0f} for {now - self._step_time:.0f}s (health.hang_timeout_s)"
        return None

    def _event(self, kind: EventKind, message: str, slice_index: int | None = None) -> None:
        if self.on_event:
            self.on_event(kind, message, slice_index)

    def _unwell_too_long(self, ref: SliceRef, node: Node) -> bool:
        """A hidden or unhealthy slice (HIDING/HIDDEN/UNHIDING, health TIMEOUT or
        UNHEALTHY_MAINTENANCE): said once, waited for as `up` waits for it, then lost."""
        if decide(node) is not Decision.WAIT_BOUNDED:
            self.unwell_since.pop(ref.index, None)
            return False
        now = self.clock.now()
        if ref.index not in self.unwell_since:
            self.unwell_since[ref.index] = now
            self._event(EventKind.SLICE_UNWELL, f"slice {ref.index} ({ref.node_name}) is {condition(node)}; waiting up to "
                        f"{self.bounded_wait_s:.0f}s for it", ref.index)
        if now - self.unwell_since[ref.index] < self.bounded_wait_s:
            return False
        self.overdue[ref.index] = condition(node)
        return True

    def observation(self, dead_nodes: set[tuple[int, int]] | None = None) -> Observation:
        """What was seen, for `classify`; looks at the cloud once more first (its own listing:
        the attempt may have ended for a reason the last shared one did not show yet)."""
        self._check_cloud()
        hosts = tuple(
            HostOutcome(h.slot.slice_index, h.slot.worker_id, h.exit_code, h.lost,
                        (h.slot.slice_index, h.slot.worker_id) in (dead_nodes or set()))
            for h in self.gang.hosts
        )
        return Observation(hosts, dict(self.slice_states), frozenset(self.notices), self.hung,
                           overdue=dict(self.overdue))

    def clean_exit(self) -> CleanExit:
        """How an attempt whose every process exited 0 ended, for `classify.finished`."""
        progress = combine(self.gang.hosts)
        return CleanExit(asked_to_stop=any(h.asked_to_stop for h in self.gang.hosts), said_done=progress.done,
                         step=progress.latest.step if progress.latest else None, total_steps=progress.total_steps)
