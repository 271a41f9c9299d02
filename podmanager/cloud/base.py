"""The cloud contract: typed records and the `TpuCloud` protocol every backend implements.

Calls map one to one onto the Cloud TPU v2 API. Mutations return an `Operation` (a
long-running operation, as in the API); `get_operation` polls it. Errors are the
types in `podmanager.cloud.errors`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol, runtime_checkable

from podmanager.cloud.errors import CloudError
from podmanager.core.spec import Capacity

CLUSTER_LABEL = "podmanager-cluster"
SLICE_LABEL = "podmanager-slice"


class NodeState(str, Enum):
    CREATING = "CREATING"
    READY = "READY"
    RESTARTING = "RESTARTING"
    REPAIRING = "REPAIRING"
    DELETING = "DELETING"
    PREEMPTED = "PREEMPTED"
    TERMINATED = "TERMINATED"
    STOPPED = "STOPPED"
    UNKNOWN = "UNKNOWN"


# States from which a node never comes back: the slice must be deleted and made anew.
DEAD_STATES = frozenset({NodeState.PREEMPTED, NodeState.TERMINATED, NodeState.STOPPED})


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


@dataclass(frozen=True)
class NodeRequest:
    """What to create: one TPU VM slice."""

    accelerator_type: str
    runtime_version: str
    capacity: Capacity = Capacity.ON_DEMAND
    labels: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    reservation: str | None = None


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
