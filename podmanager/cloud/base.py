"""The cloud contract: typed records and the `TpuCloud` protocol every backend implements.

Calls map one to one onto the Cloud TPU v2 API. Mutations return an `Operation` (a
long-running operation, as in the API); `get_operation` polls it. Errors are the
types in `podmanager.cloud.errors`.

`NODE_DECISIONS`, `HEALTH_DECISIONS` and `QUEUED_DECISIONS` are the one table of what each
state the API reports means for provisioning (`decide`, `decide_queued`): use it, wait for
it (within the caller's timeout), wait at most `BOUNDED_WAIT_S` and then replace it, replace
it at once, or wait while it goes. Choices where the documentation leaves room: UNKNOWN (a
failed repair) is replaced at once; HIDING/HIDDEN/UNHIDING and a READY node whose health is
TIMEOUT or UNHEALTHY_MAINTENANCE get the bounded wait; UNHEALTHY_TENSORFLOW is ignored (no
TensorFlow server runs); SUSPENDING is waited out and SUSPENDED, like FAILED, is deleted with
force and created again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol, runtime_checkable

from podmanager.cloud.errors import CloudError
from podmanager.core.faults import FaultTarget
from podmanager.core.spec import DEFAULT_VM_IMAGE, Capacity

CLUSTER_LABEL = "podmanager-cluster"
SLICE_LABEL = "podmanager-slice"
# A hash of the boot settings a node was created with (the spec's `boot:` section and the slice's
# runtime_version): a VM runs its startup script only at boot, so a node whose hash differs is replaced.
BOOT_LABEL = "podmanager-boot"


class NodeState(str, Enum):
    CREATING = "CREATING"
    READY = "READY"
    RESTARTING = "RESTARTING"
    REPAIRING = "REPAIRING"
    DELETING = "DELETING"
    PREEMPTED = "PREEMPTED"
    TERMINATED = "TERMINATED"
    STOPPED = "STOPPED"
    HIDING = "HIDING"
    HIDDEN = "HIDDEN"
    UNHIDING = "UNHIDING"
    UNKNOWN = "UNKNOWN"  # the API's UNKNOWN: what a node is after a failed repair
    UNSPECIFIED = "STATE_UNSPECIFIED"  # no state, or one this client does not know


class QueuedResourceState(str, Enum):
    CREATING = "CREATING"
    ACCEPTED = "ACCEPTED"
    PROVISIONING = "PROVISIONING"
    FAILED = "FAILED"
    DELETING = "DELETING"
    ACTIVE = "ACTIVE"
    SUSPENDING = "SUSPENDING"
    SUSPENDED = "SUSPENDED"
    WAITING_FOR_RESOURCES = "WAITING_FOR_RESOURCES"
    UNKNOWN = "UNKNOWN"


class Decision(str, Enum):
    """What provisioning does about a node or a queued resource in a given state."""

    USE = "use"  # READY and healthy: a slice to run on
    WAIT = "wait"  # on its way or healing by itself: waited for within the caller's timeout
    WAIT_BOUNDED = "wait-bounded"  # may come back: waited for at most BOUNDED_WAIT_S, then replaced
    REPLACE = "replace"  # never comes back: deleted (queued resources with force) and created anew
    GOING = "going"  # being deleted (by us or by the service): waited for, nothing else


# The one state table. Node states as the Cloud TPU API documents them:
# - CREATING/RESTARTING (and REIMAGING/STARTING, read as RESTARTING)/REPAIRING end by themselves.
# - PREEMPTED, TERMINATED and STOPPED never come back (a PREEMPTED node still holds quota), and
#   UNKNOWN is what a failed repair leaves: all four are replaced at once.
# - HIDING/HIDDEN/UNHIDING: the service is hiding the node (maintenance of the host, a capacity
#   move) and normally unhides it; podmanager waits BOUNDED_WAIT_S for it, then replaces it.
#   A state the client cannot read (UNSPECIFIED) gets the same bounded wait.
NODE_DECISIONS: dict[NodeState, Decision] = {
    NodeState.READY: Decision.USE,
    NodeState.CREATING: Decision.WAIT,
    NodeState.RESTARTING: Decision.WAIT,
    NodeState.REPAIRING: Decision.WAIT,
    NodeState.HIDING: Decision.WAIT_BOUNDED,
    NodeState.HIDDEN: Decision.WAIT_BOUNDED,
    NodeState.UNHIDING: Decision.WAIT_BOUNDED,
    NodeState.UNSPECIFIED: Decision.WAIT_BOUNDED,
    NodeState.PREEMPTED: Decision.REPLACE,
    NodeState.TERMINATED: Decision.REPLACE,
    NodeState.STOPPED: Decision.REPLACE,
    NodeState.UNKNOWN: Decision.REPLACE,
    NodeState.DELETING: Decision.GOING,
}

# `Node.health` of a READY node: HEALTHY (or none) is used; TIMEOUT (its health check timed out)
# and UNHEALTHY_MAINTENANCE (under maintenance) get the bounded wait, then replacement;
# UNHEALTHY_TENSORFLOW is about a TensorFlow server podmanager does not run, so it is ignored.
HEALTH_DECISIONS: dict[str, Decision] = {
    "HEALTHY": Decision.USE,
    "UNHEALTHY_TENSORFLOW": Decision.USE,
    "TIMEOUT": Decision.WAIT_BOUNDED,
    "UNHEALTHY_MAINTENANCE": Decision.WAIT_BOUNDED,
}

# Queued resources: the ones on their way or granted hold their slice; SUSPENDING (the
# service is taking a spot one back) and DELETING are waited out; FAILED (never granted, or
# past its valid_until) and SUSPENDED (a spot one taken back) are deleted with force and
# created again.
QUEUED_DECISIONS: dict[QueuedResourceState, Decision] = {
    QueuedResourceState.CREATING: Decision.WAIT,
    QueuedResourceState.ACCEPTED: Decision.WAIT,
    QueuedResourceState.WAITING_FOR_RESOURCES: Decision.WAIT,
    QueuedResourceState.PROVISIONING: Decision.WAIT,
    QueuedResourceState.UNKNOWN: Decision.WAIT,
    QueuedResourceState.ACTIVE: Decision.USE,
    QueuedResourceState.SUSPENDING: Decision.GOING,
    QueuedResourceState.DELETING: Decision.GOING,
    QueuedResourceState.FAILED: Decision.REPLACE,
    QueuedResourceState.SUSPENDED: Decision.REPLACE,
}

# How long a node in a WAIT_BOUNDED condition is waited for before it is replaced.
BOUNDED_WAIT_S = 600.0

# States from which a node never comes back: the slice must be deleted and made anew.
DEAD_STATES = frozenset(state for state, decision in NODE_DECISIONS.items() if decision is Decision.REPLACE)


def decide(node: "Node") -> Decision:
    """What to do about this node: its state's decision, and for a READY node its health's."""
    decision = NODE_DECISIONS.get(node.state, Decision.WAIT_BOUNDED)
    if decision is Decision.USE and node.health:
        return HEALTH_DECISIONS.get(node.health, Decision.USE)
    return decision


def decide_queued(queued: "QueuedResource") -> Decision:
    return QUEUED_DECISIONS.get(queued.state, Decision.WAIT)


def condition(node: "Node") -> str:
    """The node's state, with its health when that is what decides: 'READY (TIMEOUT)'."""
    if node.state is NodeState.READY and node.health and HEALTH_DECISIONS.get(node.health) is not Decision.USE:
        return f"{node.state.value} ({node.health})"
    return node.state.value


@dataclass(frozen=True)
class NodeNetwork:
    """Where a node's VMs sit on the network and whom they act as: the API's `network_config`,
    `service_account` and `tags`. An empty field leaves the API's default."""

    network: str = ""  # a name or projects/P/global/networks/N; "": the project's `default` network
    subnetwork: str = ""  # a name or projects/P/regions/R/subnetworks/S
    enable_external_ips: bool = False  # the API's default: internal addresses only
    service_account: str = ""  # an email; "": the project's default compute service account
    scopes: tuple[str, ...] = ()  # OAuth scopes of that account; (): all Cloud APIs
    tags: tuple[str, ...] = ()  # network tags, for firewall rules


@dataclass(frozen=True)
class NodeRequest:
    """What to create: one TPU VM slice."""

    accelerator_type: str
    runtime_version: str
    capacity: Capacity = Capacity.ON_DEMAND
    labels: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    reservation: str | None = None  # a reservation's name (queued resources only: the v2 API takes it nowhere else)
    # Queued resources only: the API drops the request (FAILED) if it is not granted within this
    # many seconds (queueing_policy.valid_until_duration); None: no limit.
    valid_for_s: float | None = None
    network: NodeNetwork | None = None  # None: nothing sent, the API's defaults throughout


@dataclass(frozen=True)
class Node:
    """One TPU VM slice as the API reports it."""

    name: str  # the node id, e.g. "demo-s0"
    zone: str
    accelerator_type: str
    state: NodeState
    labels: dict[str, str]
    capacity: Capacity = Capacity.ON_DEMAND
    runtime_version: str = ""
    health: str | None = None  # e.g. "HEALTHY", "UNHEALTHY_MAINTENANCE"
    endpoints: tuple[str, ...] = ()  # internal IP of each worker VM; index = worker id
    metadata: dict[str, str] = field(default_factory=dict)
    create_time: float | None = None
    network: NodeNetwork | None = None  # as the API reports it; None when it reports none

    @property
    def cluster(self) -> str | None:
        return self.labels.get(CLUSTER_LABEL)

    @property
    def slice_index(self) -> int | None:
        value = self.labels.get(SLICE_LABEL)
        return int(value) if value is not None and value.isdigit() else None


@dataclass(frozen=True)
class QueuedResource:
    name: str
    zone: str
    node_name: str
    state: QueuedResourceState
    labels: dict[str, str]  # the labels of the node it will create

    @property
    def cluster(self) -> str | None:
        return self.labels.get(CLUSTER_LABEL)


@dataclass(frozen=True)
class GuestAttribute:
    """One guest attribute a worker VM of a node wrote (`PUT .../guest-attributes/NAMESPACE/KEY` on
    its metadata server), as GetGuestAttributes reports it."""

    worker: int  # the worker id, 0-based, as in `Node.endpoints`
    namespace: str
    key: str
    value: str


@dataclass(frozen=True)
class Operation:
    """A long-running operation; `error` is set when it finished unsuccessfully."""

    name: str
    done: bool
    error: CloudError | None = None


@runtime_checkable
class TpuCloud(Protocol):
    """The Cloud TPU API as podmanager uses it. Implemented by `gcp` and `sim`."""

    backend: str
    project: str

    def create_node(self, zone: str, node_id: str, request: NodeRequest) -> Operation:
        """Start creating a node; the operation finishes when it is READY or failed."""
        ...

    def get_node(self, zone: str, node_id: str) -> Node:
        """The node; NotFoundError when there is none."""
        ...

    def list_nodes(self, zone: str) -> list[Node]:
        """Every node in the zone (callers filter by label)."""
        ...

    def delete_node(self, zone: str, node_id: str) -> Operation:
        """Start deleting a node; NotFoundError when there is none."""
        ...

    def update_node_metadata(self, zone: str, node_id: str, metadata: dict[str, str]) -> Operation:
        """Replace the node's whole metadata map with `metadata` (UpdateNode, update_mask "metadata");
        NotFoundError when there is no node. The operation fails on a node that is not READY."""
        ...

    def guest_attributes(self, zone: str, node_id: str, query_path: str = "",
                         worker: int | None = None) -> list[GuestAttribute]:
        """What the node's workers wrote as guest attributes, worker by worker: every one (query_path
        "" or "/"), one namespace ("NS/" or "NS") or one key ("NS/KEY"); all workers, or `worker` only."""
        ...

    def create_queued_resource(self, zone: str, qr_id: str, node_id: str, request: NodeRequest) -> Operation:
        """Ask for a node through a queued resource; the node appears when granted."""
        ...

    def list_queued_resources(self, zone: str) -> list[QueuedResource]:
        ...

    def delete_queued_resource(self, zone: str, qr_id: str) -> Operation:
        """Delete a queued resource and (force) the node it created."""
        ...

    def get_operation(self, name: str) -> Operation:
        ...


class SimulatedCloud(FaultTarget, Protocol):
    """A simulated cloud's own controls beyond the API: faults, and reads that are no API call
    (so no injected fault hits them). The emulator's control service (`EmulatorControl`) in a
    dry run; the simulator itself where a test drives it in-process."""

    def preempt(self, zone: str, node_id: str, notice_s: float = 0.0) -> None: ...

    def configure_cluster(self, cluster: str, create_latency_s: float, delete_latency_s: float,
                          vm_image: str = DEFAULT_VM_IMAGE, boot_delay_s: float = 0.0,
                          instance_create_latency_s: float = ..., instance_delete_latency_s: float = ...) -> None: ...

    def all_nodes(self) -> list[Node]: ...

    def all_queued_resources(self) -> list[QueuedResource]: ...

    def known_zones(self) -> list[str]: ...


class InProcessSimulator(TpuCloud, SimulatedCloud, Protocol):
    """The simulator itself, driven in-process by a test: the API and its controls in one object."""
