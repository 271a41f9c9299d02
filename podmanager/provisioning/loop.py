"""The level-triggered provisioning loop: observe -> plan -> apply, until converged.

Every pass re-reads the cloud (by label, so nothing depends on local state), plans with
the pure `reconcile.plan`, starts all of the pass's operations at once and waits for them
together, so 64 slices take about one create latency, not 64.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Callable

from podmanager.cloud import errors as cloud_errors
from podmanager.cloud.base import (
    BOUNDED_WAIT_S,
    SLICE_LABEL,
    Decision,
    Node,
    NodeState,
    Operation,
    QueuedResourceState,
    TpuCloud,
    condition,
    decide,
    decide_queued,
)
from podmanager.core.clock import Clock, RealClock
from podmanager.core.errors import PodmanagerError, TimeoutExceededError
from podmanager.core.events import EventKind
from podmanager.provisioning.plan import (
    Action,
    CreateSlice,
    DeleteNode,
    DeleteQueuedResource,
    DesiredSlice,
    NoZoneLeft,
    Observed,
    converged,
    plan,
)

# A queued resource is valid for the converge's remaining timeout plus this (see `_start`).
VALID_UNTIL_MARGIN_S = 60

# How long a converge that gives up waits for the deletes of the queued resources it created.
WITHDRAW_GRACE_S = 120.0

# Recorder(kind, message, slice_index, **data): where the loop reports what it did.
Recorder = Callable[..., None]
# Batch(): a block whose records are written together (the state store's `batch`).
Batch = Callable[[], AbstractContextManager[Any]]


@dataclass
class _Started:
    action: Action
    operation: Operation


class Provisioner:
    """Drives one cluster's slices in the cloud towards a desired list."""

    def __init__(self, cloud: TpuCloud, cluster: str, zones: list[str], *, record: Recorder | None = None,
                 batch: Batch = contextlib.nullcontext, clock: Clock | None = None, poll_interval_s: float = 0.05, max_parallel_calls: int = 32,
                 max_creates_per_slice: int = 10, bounded_wait_s: float = BOUNDED_WAIT_S):
        self.cloud = cloud
        self.cluster = cluster
        self.zones = zones
        self.record = record or (lambda *args, **kwargs: None)
        self.batch = batch
        self.clock = clock or RealClock()
        self.poll_interval_s = poll_interval_s
        self.max_parallel_calls = max_parallel_calls
        self.max_creates_per_slice = max_creates_per_slice
        self.bounded_wait_s = bounded_wait_s
        self._deadline = float("inf")  # of the converge under way
        self._queued_created: set[tuple[str, str]] = set()
        # Queued slices whose create finished (the request was accepted), not yet seen READY: the
        # create operation of a queued resource says nothing about its node.
        self._queued_not_ready: dict[str, tuple[int, str]] = {}  # node -> (slice index, zone)

    # ------------------------------------------------------------------ observe

    def observe(self) -> Observed:
        """Everything labelled with this cluster in every zone of the spec."""
        nodes: list[Node] = []
        queued = []
        for zone in self.zones:
            nodes += [n for n in self.cloud.list_nodes(zone) if n.cluster == self.cluster]
            queued += [q for q in self.cloud.list_queued_resources(zone) if q.cluster == self.cluster]
        return Observed(tuple(sorted(nodes, key=lambda n: n.name)), tuple(queued))

    # ------------------------------------------------------------------ converge

    def converge(self, desired: list[DesiredSlice], timeout_s: float,
                 unwanted_reason: str = "not in the spec") -> list[Node]:
        """Run passes until every desired slice is READY and nothing else of the cluster exists.
        A REPAIRING slice is waited for (it heals by itself), within the same timeout; a HIDDEN or
        unhealthy one (`cloud.base.Decision.WAIT_BOUNDED`) for `bounded_wait_s`, then replaced.

        Every queued resource it creates is valid only for what remains of `timeout_s` and a
        minute (queueing_policy.valid_until_duration), and if it gives up (a timeout or any other error)
        it deletes those it created that were not granted yet (force), and says so in the error:
        nothing it queued can be filled after it has stopped waiting."""
        deadline = self.clock.now() + timeout_s
        self._deadline = deadline
        self._queued_created = set()  # (zone, name) of the queued resources it creates
        self._queued_not_ready = {}
        try:
            return self._converge(desired, timeout_s, deadline, unwanted_reason)
        except PodmanagerError as error:
            self._withdraw_queued(error)
            raise

    def _converge(self, desired: list[DesiredSlice], timeout_s: float, deadline: float,
                  unwanted_reason: str) -> list[Node]:
        exhausted: dict[int, set[str]] = defaultdict(set)
        creates: dict[int, int] = defaultdict(int)
        bounded_since: dict[str, float] = {}  # node -> when it was first seen HIDDEN, unhealthy, ...
        queue_since: dict[str, float] = {}  # queued resource -> when it was first seen waiting for capacity
        waits = _WaitReporter(self.record, desired, lambda: deadline - self.clock.now(), self.bounded_wait_s)
        while True:
            observed = self.observe()
            self._ready_when_granted(observed)
            if converged(desired, observed):
                waits.settled(observed)
                return list(observed.nodes)
            now = self.clock.now()
            bounded = {n.name for n in observed.nodes if decide(n) is Decision.WAIT_BOUNDED}
            bounded_since = {name: bounded_since.get(name, now) for name in bounded}
            overdue = {name: now - since for name, since in bounded_since.items() if now - since >= self.bounded_wait_s}
            queue_since = {qr.name: queue_since.get(qr.name, now) for qr in observed.queued
                           if qr.state is QueuedResourceState.WAITING_FOR_RESOURCES}
            queue_overdue = self._queue_overdue(desired, observed, queue_since, exhausted, now)
            actions = plan(desired, observed, exhausted, unwanted_reason=unwanted_reason, overdue=overdue,
                           queue_overdue=queue_overdue)
            for action in actions:
                if isinstance(action, NoZoneLeft):
                    raise cloud_errors.CapacityError(
                        f"slice {action.slice.index} ({action.slice.request.accelerator_type}): no capacity in any "
                        f"zone of {', '.join(action.tried)}",
                        hint="Add zones to 'zones:' in the spec, use a reservation, or run 'up' again later.",
                    )
                if isinstance(action, CreateSlice):
                    creates[action.slice.index] += 1
                    if creates[action.slice.index] > self.max_creates_per_slice:
                        raise cloud_errors.CloudError(
                            f"slice {action.slice.index}: gave up after {self.max_creates_per_slice} attempts to create it"
                        )
            if self.clock.now() > deadline:
                self._timeout(desired, observed, timeout_s)
            if actions:
                self.apply(actions, exhausted, deadline)
            else:
                waits.waiting(observed)
                self.clock.sleep(self.poll_interval_s)

    def _ready_when_granted(self, observed: Observed) -> None:
        """`slice_ready` for each queued slice whose node is usable now (its queued resource granted)."""
        for node in observed.nodes:
            waiting = self._queued_not_ready.get(node.name)
            if waiting is not None and decide(node) is Decision.USE:
                del self._queued_not_ready[node.name]
                self.record(EventKind.SLICE_READY, f"{node.name} is READY in {node.zone}", waiting[0],
                            node=node.name, zone=node.zone)

    def _queue_overdue(self, desired: list[DesiredSlice], observed: Observed, queue_since: dict[str, float],
                       exhausted: dict[int, set[str]], now: float) -> dict[str, float]:
        """Queued resources that waited their slice's `queue_wait_s` for capacity (name -> seconds
        waited); their zone counts as without capacity for that slice from now on."""
        wanted = {d.node_name: d for d in desired}
        out: dict[str, float] = {}
        for qr in observed.queued:
            want = wanted.get(qr.node_name)
            if qr.name not in queue_since or want is None or want.queue_wait_s is None:
                continue
            waited = now - queue_since[qr.name]
            if waited < want.queue_wait_s:
                continue
            out[qr.name] = waited
            if qr.zone not in exhausted[want.index]:
                exhausted[want.index].add(qr.zone)
                left = [z for z in want.zones if z not in exhausted[want.index]]
                self.record(EventKind.ZONE_FALLBACK, f"{want.node_name}: waited {waited:.0f}s for capacity in {qr.zone}; "
                            + (f"trying {left[0]}" if left else "no zone left"), want.index,
                            node=want.node_name, zone=qr.zone, error="WaitingForResources")
        return out

    def _withdraw_queued(self, error: PodmanagerError) -> None:
        """Giving up: delete (force) the queued resources this converge created and that were
        not granted, wait a little for the deletes, and add what was done to `error`'s message."""
        created = self._queued_created
        if not created:
            return
        try:
            observed = self.observe()
            mine = [qr for qr in observed.queued if (qr.zone, qr.name) in created
                    and decide_queued(qr) not in (Decision.USE, Decision.GOING)]
            if not mine:
                return
            why = "gave up waiting" if isinstance(error, TimeoutExceededError) else "stopped on an error"
            index = {qr.name: qr.labels.get(SLICE_LABEL) for qr in mine}
            actions: list[Action] = [
                DeleteQueuedResource(qr.name, qr.zone, f"{why}; nothing it queued may be granted later",
                                     int(index[qr.name]) if (index[qr.name] or "").isdigit() else None)
                for qr in mine]
            self.apply(actions, defaultdict(set), self.clock.now() + WITHDRAW_GRACE_S)
            note = (f"deleted the queued resource(s) it had created and not yet granted ("
                    f"{', '.join(sorted(qr.name for qr in mine))}), so none is filled later")
        except PodmanagerError as failed:
            note = (f"could not delete the queued resource(s) it created ({failed.message}); each expires at "
                    "its valid_until, or run 'podmanager down'")
        error.message = f"{error.message}; {note}"
        error.args = (error.message, *error.args[1:])

    def _timeout(self, desired: list[DesiredSlice], observed: Observed, timeout_s: float) -> None:
        states = {n.name: condition(n) for n in observed.nodes}
        usable = {n.name for n in observed.nodes if decide(n) is Decision.USE}
        queued = {qr.node_name: f"queued resource {qr.state.value}" for qr in observed.queued}
        pending = [f"{d.node_name} ({states.get(d.node_name) or queued.get(d.node_name, 'missing')})"
                   for d in desired if d.node_name not in usable]
        extra = sorted(set(states) - {d.node_name for d in desired})
        what = ", ".join(pending + [f"{name} (to delete)" for name in extra])
        raise TimeoutExceededError(
            f"slices not settled after {timeout_s:.0f}s: {what}",
            hint="Run the same command again to continue, or 'podmanager down' to remove everything.",
        )

    # ------------------------------------------------------------------ apply

    def apply(self, actions: list[Action], exhausted: dict[int, set[str]], deadline: float) -> None:
        """Start every action's operation at once, then wait for all of them together
        (until the deadline; what is still running then is seen by the next observe)."""
        self.finish(self.start(actions), exhausted, deadline)

    def start(self, actions: list[Action], deadline: float | None = None) -> list[_Started]:
        """Start every action's operation at once (`finish` waits for them): the spare keeper
        starts under the cluster's lock and waits without it. `deadline`: how long a queued
        resource it creates stays valid (the converge's own deadline when called from it)."""
        if deadline is not None:
            self._deadline = deadline
        with self.batch():
            for action in actions:
                self._announce(action)
        with ThreadPoolExecutor(max_workers=max(1, min(self.max_parallel_calls, len(actions) or 1))) as pool:
            results = list(pool.map(self._start, actions))
        return [r for r in results if r is not None]

    def finish(self, started: list[_Started], exhausted: dict[int, set[str]], deadline: float) -> None:
        """Wait for started operations together, recording each outcome, until the deadline."""
        while started:
            with ThreadPoolExecutor(max_workers=max(1, min(self.max_parallel_calls, len(started)))) as pool:
                polled = list(pool.map(lambda s: self.cloud.get_operation(s.operation.name), started))
            waiting = []
            with self.batch():
                for item, operation in zip(started, polled):
                    if operation.done:
                        self._finished(item.action, operation, exhausted)
                    else:
                        waiting.append(_Started(item.action, operation))
            started = waiting
            if started:
                if self.clock.now() >= deadline:
                    return
                self.clock.sleep(self.poll_interval_s)

    def _announce(self, action: Action) -> None:
        """What `_start` is about to do, recorded before it calls (for every action at once, in
        one write)."""
        if isinstance(action, CreateSlice):
            want = action.slice
            self.record(EventKind.SLICE_CREATING, f"creating {want.node_name} ({want.request.accelerator_type}, "
                        f"{want.request.capacity.value}) in {action.zone}", want.index,
                        node=want.node_name, zone=action.zone)
        elif isinstance(action, DeleteNode):
            self.record(EventKind.SLICE_DELETING, f"deleting {action.name} in {action.zone}: {action.reason}",
                        action.slice_index, node=action.name, zone=action.zone, reason=action.reason)
        elif isinstance(action, DeleteQueuedResource):
            self.record(EventKind.QUEUED_RESOURCE_DELETING, f"deleting queued resource {action.name} in {action.zone}: "
                        f"{action.reason}", action.slice_index, name=action.name, zone=action.zone)

    def _start(self, action: Action) -> _Started | None:
        try:
            if isinstance(action, CreateSlice):
                want = action.slice
                if want.queued:
                    # Valid for what remains of the timeout and a margin: the converge gives up (and
                    # deletes it) first; if this process dies instead, the API fails it soon after.
                    left = max(0, math.ceil(self._deadline - self.clock.now())) + VALID_UNTIL_MARGIN_S
                    request = dataclasses.replace(want.request, valid_for_s=float(left))
                    operation = self.cloud.create_queued_resource(action.zone, want.node_name, want.node_name, request)
                    self._queued_created.add((action.zone, want.node_name))
                else:
                    operation = self.cloud.create_node(action.zone, want.node_name, want.request)
            elif isinstance(action, DeleteNode):
                operation = self.cloud.delete_node(action.zone, action.name)
            elif isinstance(action, DeleteQueuedResource):
                operation = self.cloud.delete_queued_resource(action.zone, action.name)
            else:
                return None
        except (cloud_errors.NotFoundError, cloud_errors.AlreadyExistsError):
            return None  # already gone / already there: the next pass sees it
        return _Started(action, operation)

    def _finished(self, action: Action, operation: Operation, exhausted: dict[int, set[str]]) -> None:
        error = operation.error
        if isinstance(action, CreateSlice):
            want = action.slice
            if error is None and want.queued:
                self._queued_not_ready[want.node_name] = (want.index, action.zone)
                self.record(EventKind.SLICE_QUEUED, f"{want.node_name}: queued resource accepted in {action.zone}; it is "
                            "READY once the queued resource is granted", want.index,
                            node=want.node_name, zone=action.zone)
            elif error is None:
                self.record(EventKind.SLICE_READY, f"{want.node_name} is READY in {action.zone}", want.index,
                            node=want.node_name, zone=action.zone)
            elif isinstance(error, (cloud_errors.CapacityError, cloud_errors.ReservationShortfallError)):
                exhausted[want.index].add(action.zone)
                left = [z for z in want.zones if z not in exhausted[want.index]]
                self.record(EventKind.ZONE_FALLBACK, f"{want.node_name}: {error.message}; "
                            + (f"trying {left[0]}" if left else "no zone left"), want.index,
                            node=want.node_name, zone=action.zone, error=type(error).__name__)
            elif isinstance(error, cloud_errors.PreemptedWhileCreatingError):
                self.record(EventKind.SLICE_PREEMPTED, f"{want.node_name} was preempted while being created in "
                            f"{action.zone}; it will be deleted and created again", want.index,
                            node=want.node_name, zone=action.zone, while_creating=True)
            elif isinstance(error, cloud_errors.InvalidRequestError):
                # Refused as asked: no retry and no other zone changes the request.
                raise cloud_errors.InvalidRequestError(
                    f"slice {want.index} ({want.node_name}): the Cloud TPU API refused to create it in "
                    f"{action.zone}: {error.message}. It asked for {_describe_request(want)}.",
                    hint=f"Fix that in the spec's slices (the one with accelerator {want.request.accelerator_type}) "
                         "and run 'up' again; it was tried once, not retried.",
                ) from error
            else:
                raise error
        elif error is not None and not isinstance(error, cloud_errors.NotFoundError):
            raise error
        else:
            name = action.name  # type: ignore[union-attr]
            self.record(EventKind.SLICE_DELETED, f"{name} deleted", action.slice_index, node=name)  # type: ignore[union-attr]


def _describe_request(want: DesiredSlice) -> str:
    request = want.request
    parts = [f"accelerator {request.accelerator_type}", f"runtime_version {request.runtime_version!r}",
             f"capacity {request.capacity.value}"]
    if request.reservation:
        parts.append(f"reservation {request.reservation!r}")
    network = request.network
    if network is not None:  # a network, subnetwork or account the API refuses is refused here too
        parts += [f"{what} {value!r}" for what, value in (("network", network.network),
                  ("subnetwork", network.subnetwork), ("service_account", network.service_account)) if value]
    return ", ".join(parts) + (" (as a queued resource)" if want.queued else "")


class _WaitReporter:
    """Says once what a pass with nothing to do is waiting for (slices still CREATING,
    REPAIRING, HIDDEN or DELETING), and when a repaired slice is back."""

    def __init__(self, record: Recorder, desired: list[DesiredSlice], time_left: Callable[[], float],
                 bounded_wait_s: float = BOUNDED_WAIT_S):
        self.record = record
        self.index = {d.node_name: d.index for d in desired}
        self.time_left = time_left
        self.bounded_wait_s = bounded_wait_s
        self.told: dict[str, str] = {}  # node -> the condition last reported

    def waiting(self, observed: Observed) -> None:
        for queued in observed.queued:
            key = f"queued resource {queued.name}"
            if queued.state is not QueuedResourceState.WAITING_FOR_RESOURCES or self.told.get(key) == queued.state.value:
                continue
            self.told[key] = queued.state.value
            self.record(EventKind.SLICE_WAITING, f"{queued.node_name} is waiting for capacity in {queued.zone} (queued resource "
                        f"{queued.name} is {queued.state.value}); waiting up to {max(0.0, self.time_left()):.0f}s",
                        self.index.get(queued.node_name), node=queued.node_name, zone=queued.zone,
                        state=queued.state.value)
        for node in observed.nodes:
            now = condition(node)
            if decide(node) is Decision.USE or self.told.get(node.name) == now:
                continue
            self.told[node.name] = now
            index = self.index.get(node.name)
            if node.state is NodeState.REPAIRING:
                self.record(EventKind.SLICE_REPAIRING, f"{node.name} is REPAIRING (maintenance); waiting up to "
                            f"{max(0.0, self.time_left()):.0f}s for it to come back READY", index,
                            node=node.name, zone=node.zone)
            elif decide(node) is Decision.WAIT_BOUNDED:
                wait = min(self.bounded_wait_s, max(0.0, self.time_left()))
                self.record(EventKind.SLICE_WAITING, f"{node.name} is {now}; waiting up to {wait:.0f}s for it to come "
                            "back, then replacing it", index, node=node.name, zone=node.zone, state=now)
            else:
                self.record(EventKind.SLICE_WAITING, f"waiting for {node.name} ({now})", index,
                            node=node.name, zone=node.zone, state=now)

    def settled(self, observed: Observed) -> None:
        for node in observed.nodes:
            if self.told.get(node.name) == NodeState.REPAIRING.value and node.state is NodeState.READY:
                self.record(EventKind.SLICE_REPAIRED, f"{node.name} is READY again after its repair", self.index.get(node.name),
                            node=node.name, zone=node.zone)
