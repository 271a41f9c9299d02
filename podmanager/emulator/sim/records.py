"""The simulated cloud's state as typed records: what `SimCloud` keeps in memory, and what
the emulator saves to its JSON file (one per project) to carry on from after a restart."""

from __future__ import annotations

from pydantic import BaseModel, Field

from podmanager.cloud.base import (
    Node,
    NodeNetwork,
    NodeRequest,
    NodeState,
    QueuedResource,
    QueuedResourceState,
)
from podmanager.cloud.buckets import BucketPolicy
from podmanager.cloud.instances import Instance
from podmanager.cloud.network import FirewallRule, Network, Router, Subnetwork
from podmanager.core.spec import DEFAULT_VM_IMAGE, Capacity
from podmanager.emulator.rulebook import INSTANCE_CREATE_S, INSTANCE_DELETE_S

CLUSTER_LABEL = "podmanager-cluster"
SLICE_LABEL = "podmanager-slice"


class NodeRecord(BaseModel):
    """One TPU node and the times of its pending transitions."""

    name: str
    zone: str
    accelerator_type: str
    state: NodeState
    labels: dict[str, str]
    capacity: Capacity
    runtime_version: str
    metadata: dict[str, str]
    endpoints: list[str]
    create_time: float
    ready_at: float  # CREATING -> READY
    health: str | None = None
    queued: str | None = None  # the queued resource it was made for
    preempt_on_ready: bool = False  # a preempt-while-creating fault
    preempt_notice: bool = False  # announced: what the VM's metadata serves as `preempted`
    preempt_at: float | None = None  # the end of the notice period
    repaired_at: float | None = None  # REPAIRING, HIDDEN, unhealthy, ... -> READY and HEALTHY
    # Announced host maintenance (what the VM's metadata serves as `upcoming-maintenance`): the
    # window opens at `maintenance_at`, when the node is REPAIRING for `maintenance_s`.
    maintenance_at: float | None = None
    maintenance_s: float = 0.0
    gone_at: float | None = None  # DELETING -> gone
    # worker id -> "namespace/key" -> value: what each worker VM wrote as guest attributes.
    guest_attributes: dict[int, dict[str, str]] = Field(default_factory=dict)
    network: NodeNetwork | None = None  # as it was asked for; None: the API's defaults

    @property
    def cluster(self) -> str | None:
        return self.labels.get(CLUSTER_LABEL)

    def to_node(self) -> Node:
        return Node(name=self.name, zone=self.zone, accelerator_type=self.accelerator_type, state=self.state,
                    labels=dict(self.labels), capacity=self.capacity, runtime_version=self.runtime_version,
                    health=self.health, endpoints=tuple(self.endpoints), metadata=dict(self.metadata),
                    create_time=self.create_time, network=self.network)


class QueuedRecord(BaseModel):
    name: str
    zone: str
    node_key: str  # "zone/node" of the node it holds
    node_name: str
    labels: dict[str, str]
    state: QueuedResourceState
    gone_at: float | None = None
    capacity: Capacity = Capacity.ON_DEMAND
    valid_until: float | None = None  # not granted by then: FAILED (queueing_policy.valid_until_*)
    suspended_at: float | None = None  # SUSPENDING -> SUSPENDED, its node deleted by the service
    # WAITING_FOR_RESOURCES: the node it makes once its zone has capacity again.
    waiting_for: NodeRequest | None = None

    def to_queued_resource(self) -> QueuedResource:
        return QueuedResource(name=self.name, zone=self.zone, node_name=self.node_name, state=self.state,
                              labels=dict(self.labels))


class OperationError(BaseModel):
    type: str  # a `cloud.errors` class name
    message: str


class OperationRecord(BaseModel):
    done_at: float
    error: OperationError | None = None


class QuotaFault(BaseModel):
    quota: str
    times: int


class TimedPreemption(BaseModel):
    """A scripted preemption of whichever node holds a cluster's slice at `at`."""

    at: float
    cluster: str
    slice: int
    notice_s: float = 0.0


class TimedDegrade(BaseModel):
    """A scripted degrade of whichever READY node holds a cluster's slice at `at`: its
    `Node.health` turns `health`, for `for_s` (None: until the node is replaced)."""

    at: float
    cluster: str
    slice: int
    health: str
    for_s: float | None = None


class TimedMaintenance(BaseModel):
    """A scripted announcement, at `at`, of host maintenance on whichever READY node holds a
    cluster's slice: the window opens `notice_s` later, the node REPAIRING for `duration_s`."""

    at: float
    cluster: str
    slice: int
    notice_s: float = 0.0
    duration_s: float


class Faults(BaseModel):
    create: dict[str, dict[str, int]] = Field(default_factory=dict)  # zone -> kind -> times left (-1: always)
    quota: QuotaFault | None = None
    transient: int = 0  # API calls left to fail with UNAVAILABLE
    secret_denied: int = 0  # reads of a secret by VMs left to refuse with PERMISSION_DENIED
    timed: list[TimedPreemption] = Field(default_factory=list)
    degrades: list[TimedDegrade] = Field(default_factory=list)
    maintenances: list[TimedMaintenance] = Field(default_factory=list)


class ClusterSimulation(BaseModel):
    """A cluster's simulated latencies and VM image (its spec's `simulation`), set at its `up`."""

    create_latency_s: float
    delete_latency_s: float
    vm_image: str = DEFAULT_VM_IMAGE  # what a new VM's disk holds: nothing of podmanager, or the controller's environment
    boot_delay_s: float = 0.0  # how long a new VM boots before it runs its startup script
    instance_create_latency_s: float = INSTANCE_CREATE_S  # the cluster's Compute Engine VMs (its controller)
    instance_delete_latency_s: float = INSTANCE_DELETE_S


class ComputeOperation(BaseModel):
    """A Compute Engine operation (a firewall rule's insert, ...): done when it is answered, or, an
    instance's, at `done_at`."""

    name: str
    kind: str  # insert, delete, setPrivateIpGoogleAccess, ...
    target: str  # the resource's path, e.g. global/firewalls/NAME
    region: str | None = None  # None: a global operation (or a zone's)
    zone: str | None = None  # a zone's operation (an instance's)
    done_at: float = 0.0  # the simulated cloud's time it is DONE at


class InstanceRecord(BaseModel):
    """A simulated VM: what was asked for and what the API reports (`instance`), and when it is up or gone."""

    instance: Instance
    running_at: float
    gone_at: float | None = None  # set by a delete
    halted: str = ""  # TERMINATED (stopped) or SUSPENDED; "": running (or on its way)
    guest_attributes: dict[str, str] = Field(default_factory=dict)  # "NAMESPACE/KEY" -> what the VM PUT
    resets: int = 0  # instances.reset calls so far: its VM boots again at each


class ComputeState(BaseModel):
    """The project's network side (Compute Engine), as a new project starts: see `sim/compute.py`."""

    networks: dict[str, Network] = Field(default_factory=dict)  # name -> network
    subnetworks: dict[str, Subnetwork] = Field(default_factory=dict)  # "region/name" -> subnetwork
    firewalls: dict[str, FirewallRule] = Field(default_factory=dict)  # name -> rule
    routers: dict[str, Router] = Field(default_factory=dict)  # "region/name" -> router
    # Regions whose auto-mode subnetworks exist (made when a region is first asked about, as
    # Google adds them to auto-mode networks): a subnetwork deleted in one stays deleted.
    regions: list[str] = Field(default_factory=list)
    operations: dict[str, ComputeOperation] = Field(default_factory=dict)
    instances: dict[str, InstanceRecord] = Field(default_factory=dict)  # "zone/name" -> VM
    firewall_changes_denied: bool = False  # the caller may not create or delete rules (403)
    seeded: bool = False  # the new project's network and rules are made


class StorageState(BaseModel):
    """The project's Cloud Storage buckets and their IAM policies: see `sim/storage.py`."""

    buckets: dict[str, BucketPolicy] = Field(default_factory=dict)  # name -> its IAM policy
    iam_changes_denied: bool = False  # the caller may not change a bucket's IAM policy (403)
    seeded: bool = False  # the dry run's stage bucket is made


class SimState(BaseModel):
    seq: int = 0
    timings: dict[str, ClusterSimulation] = Field(default_factory=dict)  # cluster -> its latencies and image
    nodes: dict[str, NodeRecord] = Field(default_factory=dict)  # "zone/id" -> node
    queued: dict[str, QueuedRecord] = Field(default_factory=dict)  # "zone/id" -> queued resource
    operations: dict[str, OperationRecord] = Field(default_factory=dict)  # operation name -> its outcome
    faults: Faults = Field(default_factory=Faults)
    compute: ComputeState = Field(default_factory=ComputeState)
    storage: StorageState = Field(default_factory=StorageState)
