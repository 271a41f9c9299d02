"""An in-memory Cloud TPU: the API's state machine, long-running operations and faults.

State moves when its time comes: every call first applies the transitions that are due
(CREATING -> READY after the create latency, DELETING -> gone, scheduled preemptions), so
a `FakeClock` drives it with no waiting, and `tick` applies them with no call at all (the
emulator's ticker, so a preemption happens on time whether anyone asks or not). Only the
records whose moment came are looked at, so a call costs the same for one node or 1,000.

The state lives in memory; `snapshot` hands it over as JSON when it changed (the emulator
saves it), and a `SimCloud` built with a saved `state` carries on from it.

Listeners are told of every node change `(before, after)` — `after` is None when the
node is gone; the emulator boots and kills the slice's simulated VMs on these.
`changed` (a Condition) is notified on every change and every newly scheduled moment.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import threading
from typing import Callable, Iterator

from podmanager.cloud import errors as cloud_errors
from podmanager.cloud.base import (
    DEAD_STATES,
    GuestAttribute,
    Node,
    NodeRequest,
    NodeState,
    Operation,
    QueuedResource,
    QueuedResourceState,
)
from podmanager.cloud.instances import Instance
from podmanager.core.catalog import lookup
from podmanager.core.clock import Clock, RealClock
from podmanager.core.fault_text import (
    DEFAULT_MAINTENANCE_S,
    DEFAULT_QUOTA,
    DEFAULT_TIMES,
    DEGRADED_HEALTH,
)
from podmanager.core.spec import DEFAULT_VM_IMAGE, Capacity
from podmanager.emulator.rulebook import INSTANCE_CREATE_S, INSTANCE_DELETE_S
from podmanager.emulator.sim.compute import SimCompute
from podmanager.emulator.sim.instances import SimInstances
from podmanager.emulator.sim.records import (
    CLUSTER_LABEL,
    SLICE_LABEL,
    ClusterSimulation,
    Faults,
    NodeRecord,
    OperationError,
    OperationRecord,
    QueuedRecord,
    QuotaFault,
    SimState,
    TimedDegrade,
    TimedMaintenance,
    TimedPreemption,
)
from podmanager.emulator.sim.storage import SimStorage

# A queued resource not granted yet: what valid_until applies to.
_QUEUED_WAITING = (QueuedResourceState.CREATING, QueuedResourceState.ACCEPTED,
                   QueuedResourceState.WAITING_FOR_RESOURCES, QueuedResourceState.PROVISIONING)

NodeListener = Callable[[Node | None, Node | None], None]

_ERROR_TYPES: dict[str, type[cloud_errors.CloudError]] = {
    cls.__name__: cls
    for cls in (
        cloud_errors.CapacityError,
        cloud_errors.ReservationShortfallError,
        cloud_errors.PreemptedWhileCreatingError,
        cloud_errors.QuotaError,
        cloud_errors.TransientError,
        cloud_errors.NotFoundError,
        cloud_errors.InvalidRequestError,
    )
}

# Creation faults per zone, in the order they are checked: the error type and its message
# (Cloud TPU's own wording where it is known; both of the last two arrive as operation code 3,
# told apart by the message: see `cloud/gcp/errors.py`).
_CREATE_FAULTS = {
    "capacity": ("CapacityError", "There is no more capacity in the zone {zone}; you can try in another zone"),
    "reservation": ("ReservationShortfallError", "Insufficient reserved capacity in {zone}"),
    "preempt-while-creating": ("PreemptedWhileCreatingError",
                               "Cloud TPU received a bad request. update is not supported while in state PREEMPTED"),
    "invalid-request": ("InvalidRequestError",
                        "Cloud TPU received a bad request. runtime version {runtime_version!r} is not supported in {zone}"),
}


# A simulated project's number: in the names Secret Manager returns and in the default compute
# service account its VMs run as (`<number>-compute@developer.gserviceaccount.com`).
SIMULATED_PROJECT_NUMBER = "100000000001"


class SimCloud:
    """A simulated Cloud TPU project. Implements `TpuCloud`, plus fault injection."""

    backend = "simulated"

    def __init__(
        self,
        project: str = "podmanager-sim",
        *,
        clock: Clock | None = None,
        state: SimState | None = None,
        create_latency_s: float = 0.5,
        delete_latency_s: float = 0.1,
        zones: list[str] | None = None,
        listeners: list[NodeListener] | None = None,
    ):
        """`state`: where to carry on from (the emulator's saved state); default an empty project."""
        self.project = project
        self.clock = clock or RealClock()
        self.create_latency_s = create_latency_s
        self.delete_latency_s = delete_latency_s
        self.zones = zones  # None accepts any zone name
        self.listeners = list(listeners or [])
        self._state = state or SimState()
        self._mutex = threading.RLock()
        # Told whenever something changed, and whenever a new moment is scheduled (the emulator's
        # ticker sleeps until the next one; a VM's metadata long poll waits for a change).
        self.changed = threading.Condition(self._mutex)
        self._version = 0  # bumped by every call that changed the state
        self._saved_version = 0
        self._due: list[tuple[float, int, str, str]] = []  # (when, seq, kind, key): what to look at then
        self._due_seq = itertools.count()
        with self._mutex:  # carried-on state: look at everything once
            for key in self._state.nodes:
                self._due_at(0.0, "node", key)
            for key in self._state.queued:
                self._due_at(0.0, "queued", key)
            for timed in self._state.faults.timed:
                self._due_at(timed.at, "timed", "")

    # ---------------------------------------------------------------- the state, in memory

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[SimState]:
        """Hold the state, apply what is due, run the call; tell the listeners what changed."""
        with self._mutex:
            changes: list[tuple[Node | None, Node | None]] = []
            self._pending_changes = changes
            version = self._version
            try:
                self._advance()
                yield self._state
            finally:
                self._notify(changes)
                if self._version != version:
                    self.changed.notify_all()

    def _touch(self) -> None:
        """The state changed (it is saved at the next `snapshot`)."""
        self._version += 1

    def _notify(self, changes: list[tuple[Node | None, Node | None]]) -> None:
        for old, new in changes:
            for listener in self.listeners:
                listener(old, new)

    def snapshot(self) -> tuple[int, str] | None:
        """(version, the state as JSON) if it changed since the last `saved`, else None."""
        with self._mutex:
            if self._version == self._saved_version:
                return None
            return self._version, self._state.model_dump_json()

    def saved(self, version: int) -> None:
        """The snapshot of `version` is on disk."""
        with self._mutex:
            self._saved_version = max(self._saved_version, version)

    def version(self) -> int:
        """How many calls have changed the state so far (the moments come due included)."""
        with self._transaction():
            return self._version

    def wait_for_change(self, version: int, timeout_s: float) -> None:
        """Return when the state changed since `version` (see `version`), or after `timeout_s`."""
        with self.changed:
            if self._version == version:
                self.changed.wait(timeout_s)

    def tick(self) -> float | None:
        """Apply every transition whose time has come; when the next one is due (None: nothing pending)."""
        with self._transaction():
            return self._due[0][0] if self._due else None

    @contextlib.contextmanager
    def compute(self) -> Iterator[SimCompute]:
        """The project's network side (Compute Engine: `sim/compute.py`), held under the cloud's
        lock; what it changed is saved with the rest of the state."""
        with self._transaction() as state:
            project = SimCompute(state.compute, self.project, now=self.clock.now(),
                                 instance_latency=self._instance_latency)
            try:
                yield project
            finally:
                if project.changed:
                    self._touch()

    @contextlib.contextmanager
    def storage(self) -> Iterator[SimStorage]:
        """The project's Cloud Storage buckets and their IAM policies (`sim/storage.py`), held
        under the cloud's lock; what it changed is saved with the rest of the state."""
        with self._transaction() as state:
            project = SimStorage(state.storage, self.project)
            try:
                yield project
            finally:
                if project.changed:
                    self._touch()

    def create_bucket(self, name: str) -> None:
        """A bucket made in the project (by hand, as a user would before `up`)."""
        with self.storage() as storage:
            storage.create_bucket(name)

    def delete_bucket(self, name: str) -> None:
        with self.storage() as storage:
            storage.delete_bucket(name)

    def deny_bucket_iam_changes(self, denied: bool = True) -> None:
        """Cloud Storage refuses (403) to change a bucket's IAM policy: the caller lacks
        storage.buckets.setIamPolicy (a bucket of another team, a narrow role)."""
        with self.storage() as storage:
            storage.deny_iam_changes(denied)

    def node_record(self, zone: str, node_id: str) -> NodeRecord | None:
        """A copy of one node's record as it is now (what a VM's metadata server reads)."""
        with self._transaction() as state:
            record = state.nodes.get(f"{zone}/{node_id}")
            return record.model_copy(deep=True) if record else None

    def node_records(self) -> list[NodeRecord]:
        """Copies of every node's record as it is now (what the simulated network places)."""
        with self._transaction() as state:
            return [record.model_copy(deep=True) for record in state.nodes.values()]

    # ---------------------------------------------------------------- state machine

    def _due_at(self, when: float, kind: str, key: str) -> None:
        """Look at this node, queued resource or the timed faults (kind) again at `when`."""
        first = not self._due or when < self._due[0][0]
        heapq.heappush(self._due, (when, next(self._due_seq), kind, key))
        if first:
            self.changed.notify_all()  # a sleeping ticker must wake earlier

    def _advance(self) -> None:
        """Apply what is due. Only the records whose moment came are looked at, so a call
        costs the same with 1,000 nodes as with one."""
        now = self.clock.now()
        while self._due and self._due[0][0] <= now:
            _, _, kind, key = heapq.heappop(self._due)
            if kind == "node":
                self._advance_node(key, now)
            elif kind == "queued":
                self._advance_queued(key, now)
            else:
                self._fire_due_faults(now)

    def _fire_due_faults(self, now: float) -> None:
        for timed in [t for t in self._state.faults.timed if t.at <= now]:
            self._state.faults.timed.remove(timed)
            self._touch()
            self._fire_timed_fault(timed)
        for degrade in [d for d in self._state.faults.degrades if d.at <= now]:
            self._state.faults.degrades.remove(degrade)
            self._touch()
            key = self._slice_node(degrade.cluster, degrade.slice)
            if key is not None:
                self._degrade_locked(key, state=None, health=degrade.health, for_s=degrade.for_s)
        for maintenance in [m for m in self._state.faults.maintenances if m.at <= now]:
            self._state.faults.maintenances.remove(maintenance)
            self._touch()
            key = self._slice_node(maintenance.cluster, maintenance.slice)
            if key is not None:
                self._announce_maintenance(key, maintenance.notice_s, maintenance.duration_s)

    def _advance_node(self, key: str, now: float) -> None:
        record = self._state.nodes.get(key)
        if record is None:
            return
        if record.state == NodeState.CREATING and record.ready_at <= now:
            if record.preempt_on_ready:
                self._set_state(key, NodeState.PREEMPTED)
            else:
                record.health = "HEALTHY"
                self._set_state(key, NodeState.READY)
        elif (record.repaired_at is not None and record.repaired_at <= now
              and record.state not in DEAD_STATES and record.state != NodeState.DELETING):
            record.repaired_at = None
            record.health = "HEALTHY"
            self._set_state(key, NodeState.READY)
        elif record.maintenance_at is not None and record.maintenance_at <= now:
            self._start_maintenance(key, now)
        elif record.state == NodeState.DELETING and record.gone_at is not None and record.gone_at <= now:
            self._remove_node(key)
        elif record.preempt_at is not None and record.preempt_at <= now:
            self._preempt_now(key)

    def _advance_queued(self, key: str, now: float) -> None:
        queued = self._state.queued.get(key)
        if queued is None:
            return
        node = self._state.nodes.get(queued.node_key)
        before = queued.state
        if queued.state == QueuedResourceState.DELETING and queued.gone_at is not None and queued.gone_at <= now:
            del self._state.queued[key]
            self._touch()
            return
        if queued.waiting_for is not None and queued.state == QueuedResourceState.WAITING_FOR_RESOURCES:
            if queued.valid_until is not None and queued.valid_until <= now:
                queued.state = QueuedResourceState.FAILED
                queued.waiting_for = None
            elif not self._zone_is_full(queued.zone):  # capacity came: the node is made now
                request, queued.waiting_for = queued.waiting_for, None
                self._create_node_locked(queued.zone, queued.node_name, request, queued=queued.name)
                granted = queued.node_key in self._state.nodes
                queued.state = QueuedResourceState.PROVISIONING if granted else QueuedResourceState.FAILED
            if queued.state != before:
                self._touch()
            return
        if queued.state == QueuedResourceState.SUSPENDING and (queued.suspended_at or 0.0) <= now:
            # The service takes a preempted spot queued resource back: its node goes, it stays SUSPENDED.
            if node is not None:
                self._remove_node(queued.node_key)
            queued.state = QueuedResourceState.SUSPENDED
        elif queued.state in _QUEUED_WAITING and node is not None and node.state == NodeState.READY:
            queued.state = QueuedResourceState.ACTIVE
        elif queued.state in _QUEUED_WAITING and node is not None and node.state in DEAD_STATES:
            queued.state = QueuedResourceState.FAILED
        elif queued.state in _QUEUED_WAITING and queued.valid_until is not None and queued.valid_until <= now:
            # Not granted within queueing_policy.valid_until_*: FAILED, and what it began goes.
            queued.state = QueuedResourceState.FAILED
            if node is not None and node.state != NodeState.DELETING:
                self._start_delete(queued.node_key)
        if queued.state != before:
            self._touch()

    def _fire_timed_fault(self, timed: TimedPreemption) -> None:
        key = self._slice_node(timed.cluster, timed.slice)
        if key is not None:
            self._schedule_preemption(key, timed.notice_s)

    def _slice_node(self, cluster: str, slice_index: int) -> str | None:
        """The READY node that holds a cluster's slice now, if any (a scripted fault's target)."""
        for key, record in self._state.nodes.items():
            if (record.cluster == cluster and record.labels.get(SLICE_LABEL) == str(slice_index)
                    and record.state == NodeState.READY):
                return key
        return None

    def _schedule_preemption(self, key: str, notice_s: float) -> None:
        record = self._state.nodes[key]
        record.preempt_notice = True
        if notice_s <= 0:
            self._preempt_now(key)
        else:
            record.preempt_at = self.clock.now() + notice_s
            self._due_at(record.preempt_at, "node", key)
        self._touch()

    def _preempt_now(self, key: str) -> None:
        """Spot slices are PREEMPTED; others lose their VMs to maintenance (TERMINATED)."""
        record = self._state.nodes[key]
        record.preempt_at = None
        if record.state == NodeState.DELETING or record.state in DEAD_STATES:
            return
        spot = record.capacity == Capacity.SPOT
        self._set_state(key, NodeState.PREEMPTED if spot else NodeState.TERMINATED)
        queued = self._state.queued.get(f"{record.zone}/{record.queued}") if record.queued else None
        if spot and queued is not None and queued.state == QueuedResourceState.ACTIVE:
            # A spot queued resource is SUSPENDING while the service deletes its node, then SUSPENDED.
            queued.state = QueuedResourceState.SUSPENDING
            queued.suspended_at = self.clock.now() + self._latency(record.cluster)[1]
            self._due_at(queued.suspended_at, "queued", f"{record.zone}/{record.queued}")

    def _set_state(self, key: str, new: NodeState) -> None:
        record = self._state.nodes[key]
        before = record.to_node()
        record.state = new
        if new in DEAD_STATES:
            record.health = None
        self._changed_node(key, before)

    def _changed_node(self, key: str, before: Node | None) -> None:
        """Tell the listeners, and look at the node's queued resource (it follows its node)."""
        record = self._state.nodes[key]
        self._touch()
        self._pending_changes.append((before, record.to_node()))
        if record.queued:
            self._due_at(self.clock.now(), "queued", f"{record.zone}/{record.queued}")

    def _remove_node(self, key: str) -> None:
        record = self._state.nodes.pop(key)
        self._touch()
        self._pending_changes.append((record.to_node(), None))
        if record.queued:
            self._due_at(self.clock.now(), "queued", f"{record.zone}/{record.queued}")

    def _instance_latency(self, cluster: str) -> tuple[float, float]:
        """(create, delete) seconds of a cluster's Compute Engine VMs: its own if `configure_cluster`
        set them, else the rulebook's."""
        timing = self._state.timings.get(cluster)
        return (timing.instance_create_latency_s, timing.instance_delete_latency_s) if timing else (
            INSTANCE_CREATE_S, INSTANCE_DELETE_S)

    def _latency(self, cluster: str | None) -> tuple[float, float]:
        """(create, delete) latency of a cluster's nodes: its own if `configure_cluster` set them."""
        timing = self._state.timings.get(cluster or "")
        return (timing.create_latency_s, timing.delete_latency_s) if timing else (
            self.create_latency_s, self.delete_latency_s)

    def _new_operation(self, zone: str, done_at: float, error: tuple[str, str] | None = None) -> Operation:
        self._state.seq += 1
        self._touch()
        name = f"projects/{self.project}/locations/{zone}/operations/op-{self._state.seq}"
        self._state.operations[name] = OperationRecord(
            done_at=done_at, error=OperationError(type=error[0], message=error[1]) if error else None)
        return self._operation(name)

    def _operation(self, name: str) -> Operation:
        record = self._state.operations.get(name)
        if record is None:
            raise cloud_errors.NotFoundError(f"operation {name} not found")
        done = record.done_at <= self.clock.now()
        error = None
        if done and record.error:
            error = _ERROR_TYPES[record.error.type](record.error.message)
        return Operation(name=name, done=done, error=error)

    # ---------------------------------------------------------------- call checks

    def _check_call(self, zone: str | None = None) -> None:
        faults = self._state.faults
        if faults.transient > 0:
            faults.transient -= 1
            self._touch()
            raise cloud_errors.TransientError("503 UNAVAILABLE: the service is temporarily unavailable (simulated)")
        if zone is not None and self.zones is not None and zone not in self.zones:
            raise cloud_errors.InvalidRequestError(
                f"zone {zone!r} does not exist in the simulator; known zones: {', '.join(self.zones)}"
            )

    def _check_quota(self, zone: str) -> None:
        quota = self._state.faults.quota
        if quota and quota.times > 0:
            quota.times -= 1
            self._touch()
            if quota.times == 0:
                self._state.faults.quota = None
            raise cloud_errors.QuotaError(
                f"429 RESOURCE_EXHAUSTED: quota {quota.quota} exceeded in {zone}", quota=quota.quota
            )

    def _zone_is_full(self, zone: str) -> bool:
        """A capacity fault is in force in the zone: creates fail, queued resources wait."""
        return self._state.faults.create.get(zone, {}).get("capacity", 0) != 0

    def _recheck_waiting(self) -> None:
        """Capacity may have come back (a fault cleared or used up): look at every waiting request."""
        for key, queued in self._state.queued.items():
            if queued.waiting_for is not None:
                self._due_at(self.clock.now(), "queued", key)

    def _take_create_fault(self, zone: str, request: NodeRequest) -> tuple[str, str] | None:
        per_zone = self._state.faults.create.get(zone, {})
        for kind, (error_type, message) in _CREATE_FAULTS.items():
            remaining = per_zone.get(kind, 0)
            if remaining != 0:
                if remaining == 1:  # used up: no longer pending (a negative count never runs out)
                    del per_zone[kind]
                    if not per_zone:
                        del self._state.faults.create[zone]
                else:
                    per_zone[kind] = remaining - 1 if remaining > 0 else remaining
                self._touch()
                if kind == "capacity" and remaining == 1:
                    self._recheck_waiting()
                return error_type, message.format(zone=zone, runtime_version=request.runtime_version)
        return None

    # ---------------------------------------------------------------- nodes

    def create_node(self, zone: str, node_id: str, request: NodeRequest) -> Operation:
        with self._transaction():
            self._check_call(zone)
            return self._create_node_locked(zone, node_id, request, queued=None)

    def _create_node_locked(self, zone: str, node_id: str, request: NodeRequest, queued: str | None) -> Operation:
        state = self._state
        key = f"{zone}/{node_id}"
        if key in state.nodes:
            raise cloud_errors.AlreadyExistsError(f"node {node_id} already exists in {zone}")
        try:
            accelerator = lookup(request.accelerator_type)
        except KeyError:
            raise cloud_errors.InvalidRequestError(
                f"acceleratorType {request.accelerator_type!r} is not supported"
            ) from None
        self._check_quota(zone)
        now = self.clock.now()
        fault = self._take_create_fault(zone, request)
        create_latency_s = self._latency(request.labels.get(CLUSTER_LABEL))[0]
        if fault and fault[0] != "PreemptedWhileCreatingError":
            # The API accepts the request and the operation fails; no node is left.
            return self._new_operation(zone, now + min(create_latency_s, 0.05), fault)
        ready_at = now + create_latency_s
        record = NodeRecord(
            name=node_id, zone=zone, accelerator_type=request.accelerator_type, state=NodeState.CREATING,
            labels=dict(request.labels), capacity=request.capacity, runtime_version=request.runtime_version,
            metadata=dict(request.metadata), endpoints=["127.0.0.1"] * accelerator.hosts, create_time=now,
            ready_at=ready_at, queued=queued, preempt_on_ready=bool(fault), network=request.network)
        state.nodes[key] = record
        self._changed_node(key, None)
        self._due_at(ready_at, "node", key)
        return self._new_operation(zone, ready_at, fault)

    def get_node(self, zone: str, node_id: str) -> Node:
        with self._transaction():
            self._check_call(zone)
            return self._node_record(zone, node_id).to_node()

    def list_nodes(self, zone: str) -> list[Node]:
        with self._transaction() as state:
            self._check_call(zone)
            return [r.to_node() for r in state.nodes.values() if r.zone == zone]

    def delete_node(self, zone: str, node_id: str) -> Operation:
        with self._transaction():
            self._check_call(zone)
            self._node_record(zone, node_id)
            return self._start_delete(f"{zone}/{node_id}")

    def update_node_metadata(self, zone: str, node_id: str, metadata: dict[str, str]) -> Operation:
        """Replace the node's metadata (UpdateNode with update_mask "metadata"); done at once. Only a
        READY node takes it: otherwise the operation fails as Cloud TPU's does (code 3)."""
        with self._transaction():
            self._check_call(zone)
            key = f"{zone}/{node_id}"
            record = self._node_record(zone, node_id)
            now = self.clock.now()
            if record.state != NodeState.READY:
                return self._new_operation(zone, now, (
                    "InvalidRequestError",
                    f"Cloud TPU received a bad request. update is not supported while in state {record.state.value}"))
            before = record.to_node()
            record.metadata = dict(metadata)
            self._changed_node(key, before)
            return self._new_operation(zone, now)

    def set_guest_attribute(self, zone: str, node_id: str, worker: int, path: str, value: str) -> None:
        """What a worker VM's `PUT .../guest-attributes/NAMESPACE/KEY` stores (`path` is NAMESPACE/KEY).
        Not an API call: no injected fault applies."""
        namespace, _, name = path.strip("/").partition("/")
        if not namespace or not name or "/" in name:
            raise cloud_errors.InvalidRequestError(f"guest attribute path {path!r} is not NAMESPACE/KEY")
        with self._transaction():
            record = self._node_record(zone, node_id)
            _check_worker(record, worker)
            record.guest_attributes.setdefault(worker, {})[f"{namespace}/{name}"] = value
            self._touch()

    def guest_attributes(self, zone: str, node_id: str, query_path: str = "",
                         worker: int | None = None) -> list[GuestAttribute]:
        """The guest attributes the node's workers wrote, by worker then path: every one (query_path
        "" or "/"), one namespace ("NS/" or "NS") or one key ("NS/KEY"); all workers, or `worker` only."""
        with self._transaction():
            self._check_call(zone)
            record = self._node_record(zone, node_id)
            if worker is not None:
                _check_worker(record, worker)
            workers = range(len(record.endpoints)) if worker is None else [worker]
            found = []
            for one in workers:
                for path, value in sorted(record.guest_attributes.get(one, {}).items()):
                    namespace, name = path.split("/", 1)
                    if _queried(query_path, namespace, name):
                        found.append(GuestAttribute(worker=one, namespace=namespace, key=name, value=value))
            return found

    def _node_record(self, zone: str, node_id: str) -> NodeRecord:
        record = self._state.nodes.get(f"{zone}/{node_id}")
        if record is None:
            raise cloud_errors.NotFoundError(f"node {node_id} not found in {zone}")
        return record

    def _start_delete(self, key: str) -> Operation:
        record = self._state.nodes[key]
        if record.state != NodeState.DELETING or record.gone_at is None:
            record.gone_at = self.clock.now() + self._latency(record.cluster)[1]
            self._set_state(key, NodeState.DELETING)
            self._due_at(record.gone_at, "node", key)
        return self._new_operation(record.zone, record.gone_at)

    # ---------------------------------------------------------------- queued resources

    def create_queued_resource(self, zone: str, qr_id: str, node_id: str, request: NodeRequest) -> Operation:
        with self._transaction() as state:
            self._check_call(zone)
            key = f"{zone}/{qr_id}"
            if key in state.queued:
                raise cloud_errors.AlreadyExistsError(f"queued resource {qr_id} already exists in {zone}")
            valid_until = None if request.valid_for_s is None else self.clock.now() + request.valid_for_s
            record = QueuedRecord(name=qr_id, zone=zone, node_key=f"{zone}/{node_id}", node_name=node_id,
                                  labels=dict(request.labels), state=QueuedResourceState.WAITING_FOR_RESOURCES,
                                  capacity=request.capacity, valid_until=valid_until)
            if self._zone_is_full(zone):
                # No capacity: the request is accepted and waits (it fails only at its valid_until).
                self._check_quota(zone)
                record.waiting_for = request
                operation = self._new_operation(zone, self.clock.now())
            else:
                operation = self._create_node_locked(zone, node_id, request, queued=qr_id)
                granted = f"{zone}/{node_id}" in state.nodes
                record.state = QueuedResourceState.PROVISIONING if granted else QueuedResourceState.FAILED
            state.queued[key] = record
            self._touch()
            if valid_until is not None:
                self._due_at(valid_until, "queued", key)
            return operation

    def list_queued_resources(self, zone: str) -> list[QueuedResource]:
        with self._transaction() as state:
            self._check_call(zone)
            return [r.to_queued_resource() for r in state.queued.values() if r.zone == zone]

    def delete_queued_resource(self, zone: str, qr_id: str) -> Operation:
        with self._transaction() as state:
            self._check_call(zone)
            key = f"{zone}/{qr_id}"
            record = state.queued.get(key)
            if record is None:
                raise cloud_errors.NotFoundError(f"queued resource {qr_id} not found in {zone}")
            if record.node_key in state.nodes:  # force: the node goes with it
                self._start_delete(record.node_key)
            record.state = QueuedResourceState.DELETING
            record.gone_at = self.clock.now() + self._latency(record.labels.get(CLUSTER_LABEL))[1]
            self._due_at(record.gone_at, "queued", key)
            return self._new_operation(zone, record.gone_at)

    def get_operation(self, name: str) -> Operation:
        with self._transaction():
            self._check_call()
            return self._operation(name)

    # ---------------------------------------------------------------- fault injection

    # The fault type every caller builds, with the defaults these share, is core/faults.py.
    def inject_create_fault(self, zone: str, kind: str, times: int = DEFAULT_TIMES) -> None:
        """Make the next `times` creates in `zone` fail with `kind` (UNTIL_CLEARED, -1: until cleared)."""
        if kind not in _CREATE_FAULTS:
            raise ValueError(f"kind must be one of {', '.join(_CREATE_FAULTS)}")
        with self._transaction() as state:
            state.faults.create.setdefault(zone, {})[kind] = times
            self._touch()
            self._recheck_waiting()

    def inject_quota(self, quota: str = DEFAULT_QUOTA, times: int = DEFAULT_TIMES) -> None:
        with self._transaction() as state:
            state.faults.quota = QuotaFault(quota=quota, times=times)
            self._touch()

    def inject_transient(self, calls: int) -> None:
        """The next `calls` API calls fail with UNAVAILABLE."""
        with self._transaction() as state:
            state.faults.transient = calls
            self._touch()

    def deny_secret_reads(self, reads: int) -> None:
        """The next `reads` reads of a secret by a VM are refused (the emulator's Secret Manager asks
        `take_secret_denial` on each)."""
        with self._transaction() as state:
            state.faults.secret_denied = reads
            self._touch()

    def deny_firewall_changes(self, denied: bool = True) -> None:
        """Compute Engine refuses (403) to create or delete firewall rules: a network whose rules
        the caller may not change (a Shared VPC's host project, a narrow role)."""
        with self.compute() as project:
            project.deny_firewall_changes(denied)

    def take_secret_denial(self) -> bool:
        """Whether this read of a secret by a VM is refused: one of the denials `deny_secret_reads` set."""
        with self._transaction() as state:
            if state.faults.secret_denied <= 0:
                return False
            state.faults.secret_denied -= 1
            self._touch()
            return True

    def clear_faults(self) -> None:
        with self._transaction() as state:
            state.faults = Faults()
            self._touch()
            self._recheck_waiting()

    def pending_faults(self) -> Faults:
        """The faults still waiting to happen, as the state records them (the simulator's own view, for tests)."""
        with self._transaction() as state:
            return state.faults.model_copy(deep=True)

    def preempt(self, zone: str, node_id: str, notice_s: float = 0.0) -> None:
        """Preempt a node now, or after a notice period (spot: PREEMPTED, else TERMINATED)."""
        with self._transaction():
            self._node_record(zone, node_id)
            self._schedule_preemption(f"{zone}/{node_id}", notice_s)

    def preempt_slice_later(self, cluster: str, slice_index: int, after_s: float, notice_s: float = 0.0) -> None:
        """Preempt whichever node holds this slice when `after_s` has passed."""
        with self._transaction() as state:
            at = self.clock.now() + after_s
            state.faults.timed.append(TimedPreemption(at=at, cluster=cluster, slice=slice_index, notice_s=notice_s))
            self._touch()
            self._due_at(at, "timed", "")

    def notice_announced(self, zone: str, node_id: str) -> bool:
        """True while a preemption is announced for this node (what its metadata serves)."""
        with self._transaction() as state:
            record = state.nodes.get(f"{zone}/{node_id}")
            return bool(record and record.preempt_notice)

    def repair(self, zone: str, node_id: str, duration_s: float) -> None:
        """Maintenance that the slice survives: REPAIRING for a while, then READY."""
        with self._transaction() as state:
            key = f"{zone}/{node_id}"
            record = state.nodes[key]
            record.repaired_at = self.clock.now() + duration_s
            self._set_state(key, NodeState.REPAIRING)
            self._due_at(record.repaired_at, "node", key)

    def schedule_maintenance(self, zone: str, node_id: str, after_s: float, duration_s: float) -> None:
        """Announce host maintenance (the v2alpha1 API's SimulateMaintenanceEvent, as a notice):
        the VM's metadata serves it as upcoming maintenance at once; `after_s` from now the window
        opens and the node is REPAIRING for `duration_s`, then READY."""
        with self._transaction():
            self._node_record(zone, node_id)
            self._announce_maintenance(f"{zone}/{node_id}", after_s, duration_s)

    def maintain_slice_later(self, cluster: str, slice_index: int, after_s: float, notice_s: float = 0.0,
                             duration_s: float = DEFAULT_MAINTENANCE_S) -> None:
        """`after_s` from now, announce maintenance on whichever READY node holds this slice: its
        window opens `notice_s` after the announcement, REPAIRING for `duration_s`."""
        with self._transaction() as state:
            at = self.clock.now() + after_s
            state.faults.maintenances.append(TimedMaintenance(at=at, cluster=cluster, slice=slice_index,
                                                              notice_s=notice_s, duration_s=duration_s))
            self._touch()
            self._due_at(at, "timed", "")

    def _announce_maintenance(self, key: str, notice_s: float, duration_s: float) -> None:
        record = self._state.nodes[key]
        record.maintenance_at = self.clock.now() + notice_s
        record.maintenance_s = duration_s
        self._due_at(record.maintenance_at, "node", key)
        self._touch()

    def _start_maintenance(self, key: str, now: float) -> None:
        record = self._state.nodes[key]
        record.maintenance_at = None
        if record.state in DEAD_STATES or record.state == NodeState.DELETING:
            self._touch()
            return
        record.repaired_at = now + record.maintenance_s
        self._set_state(key, NodeState.REPAIRING)
        self._due_at(record.repaired_at, "node", key)

    def degrade(self, zone: str, node_id: str, *, state: NodeState | None = None, health: str | None = None,
                for_s: float | None = None) -> None:
        """Put a node into one of the API's other conditions: `state` HIDING, HIDDEN, UNHIDING or
        UNKNOWN (what a failed repair leaves), and/or `health` TIMEOUT, UNHEALTHY_MAINTENANCE or
        UNHEALTHY_TENSORFLOW. With `for_s` the node is READY and HEALTHY again after that long."""
        with self._transaction():
            self._node_record(zone, node_id)
            self._degrade_locked(f"{zone}/{node_id}", state=state, health=health, for_s=for_s)

    def degrade_slice_later(self, cluster: str, slice_index: int, after_s: float, health: str,
                            for_s: float | None = None) -> None:
        """Whichever READY node holds this slice `after_s` from now turns `health` (TIMEOUT or
        UNHEALTHY_MAINTENANCE), for `for_s` (None: until it is replaced)."""
        if health not in DEGRADED_HEALTH:
            raise ValueError(f"health must be one of {', '.join(DEGRADED_HEALTH)}, not {health!r}")
        with self._transaction() as state:
            at = self.clock.now() + after_s
            state.faults.degrades.append(TimedDegrade(at=at, cluster=cluster, slice=slice_index, health=health,
                                                      for_s=for_s))
            self._touch()
            self._due_at(at, "timed", "")

    def _degrade_locked(self, key: str, *, state: NodeState | None, health: str | None,
                        for_s: float | None) -> None:
        record = self._state.nodes[key]
        before = record.to_node()
        if health is not None:
            record.health = health
        if for_s is not None:
            record.repaired_at = self.clock.now() + for_s
            self._due_at(record.repaired_at, "node", key)
        if state is not None:
            self._set_state(key, state)
        else:
            self._changed_node(key, before)

    def configure_cluster(self, cluster: str, create_latency_s: float, delete_latency_s: float,
                          vm_image: str = DEFAULT_VM_IMAGE, boot_delay_s: float = 0.0,
                          instance_create_latency_s: float = INSTANCE_CREATE_S,
                          instance_delete_latency_s: float = INSTANCE_DELETE_S) -> None:
        """How long a cluster's nodes and Compute Engine VMs take to create and delete, what its
        VMs' disks hold and how long they boot (its spec's `simulation`)."""
        with self._transaction() as state:
            timing = ClusterSimulation(create_latency_s=create_latency_s, delete_latency_s=delete_latency_s,
                                       vm_image=vm_image, boot_delay_s=boot_delay_s,
                                       instance_create_latency_s=instance_create_latency_s,
                                       instance_delete_latency_s=instance_delete_latency_s)
            if state.timings.get(cluster) != timing:
                state.timings[cluster] = timing
                self._touch()

    def vm_image(self, cluster: str) -> str:
        """The image a cluster's new VMs boot from (`DEFAULT_VM_IMAGE` unless its `up` said otherwise)."""
        with self._transaction() as state:
            found = state.timings.get(cluster)
            return found.vm_image if found else DEFAULT_VM_IMAGE

    def boot_delay(self, cluster: str) -> float:
        """How long a cluster's new VMs boot before their startup script runs (0 unless its `up` said)."""
        with self._transaction() as state:
            found = state.timings.get(cluster)
            return found.boot_delay_s if found else 0.0

    def terminate(self, zone: str, node_id: str) -> None:
        """Maintenance that the slice does not survive."""
        with self._transaction():
            self._set_state(f"{zone}/{node_id}", NodeState.TERMINATED)

    def all_nodes(self) -> list[Node]:
        """Every node in every zone (a test and `down` helper; the API lists per zone)."""
        with self._transaction() as state:
            return [r.to_node() for r in state.nodes.values()]

    def known_zones(self) -> list[str]:
        """Zones that hold anything, plus the configured ones."""
        with self._transaction() as state:
            used = {r.zone for r in state.nodes.values()} | {r.zone for r in state.queued.values()}
        return sorted(used | set(self.zones or []))

    def all_instances(self) -> list[Instance]:
        """Every Compute Engine instance, as the API reports it (not an API call: no injected fault)."""
        with self.compute() as project:
            return SimInstances(project).instances(None, {})

    def all_queued_resources(self) -> list[QueuedResource]:
        """Every queued resource (a test and `down` helper: not an API call, so no injected fault)."""
        with self._transaction() as state:
            return [r.to_queued_resource() for r in state.queued.values()]


def _check_worker(record: NodeRecord, worker: int) -> None:
    if not 0 <= worker < len(record.endpoints):
        raise cloud_errors.InvalidRequestError(
            f"worker {worker} does not exist on node {record.name} (workers 0 to {len(record.endpoints) - 1})")


def _queried(query_path: str, namespace: str, key: str) -> bool:
    """Whether a guest attribute is under `query_path`: "" or "/" (all), "NS/" or "NS", or "NS/KEY"."""
    wanted_namespace, _, wanted_key = query_path.strip("/").partition("/")
    if not wanted_namespace:
        return True
    return namespace == wanted_namespace and (not wanted_key or key == wanted_key)
