"""The emulator's control verbs, declared once for both ends: each verb's name, its typed
request and the type of its reply.

The client (`control.py::EmulatorControl`) sends a verb's request and reads its reply by the
verb's entry; the server (`tpu_api.py::TpuEmulator.control`, with the emulator's own verbs
added by `server.py::Emulator`) validates the request by the same entry and hands it to the
verb's handler. A new verb is one entry here and one handler there (and the client's method
that names it); `tests/emulator/test_control_verbs.py` checks that every entry has both.

On the wire (gRPC `podmanager.emulator.Control/Call`, JSON both ways):
`{"version": 1, "method": "fault", "args": {"spec": "capacity:us-central2-b"}}` -> `{"result": null}`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, JsonValue, TypeAdapter
from typing_extensions import TypedDict  # pydantic reads typing's only from Python 3.12

from podmanager.cloud.base import Node, NodeState, QueuedResource
from podmanager.cloud.instances import Instance
from podmanager.core.fault_text import (
    DEFAULT_MAINTENANCE_S,
    DEFAULT_QUOTA,
    DEFAULT_TIMES,
)
from podmanager.core.spec import DEFAULT_VM_IMAGE
from podmanager.emulator.iam.project import ProjectPolicy
from podmanager.emulator.rulebook import INSTANCE_CREATE_S, INSTANCE_DELETE_S
from podmanager.emulator.sim.records import Faults

CONTROL_SERVICE = "podmanager.emulator.Control"
CONTROL_VERSION = 1  # a call without one is of version 1 (the clients before it was sent)


class ControlRequest(BaseModel):
    """A verb's arguments; a field the verb does not take is refused, not ignored."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class NoArgs(ControlRequest):
    pass


class FaultText(ControlRequest):
    spec: str  # a fault as text (`core/faults.py`)
    cluster: str | None = None  # the cluster a `preempt:SLICE` is of


class CreateFault(ControlRequest):
    zone: str
    kind: str
    times: int = DEFAULT_TIMES


class QuotaFault(ControlRequest):
    quota: str = DEFAULT_QUOTA
    times: int = DEFAULT_TIMES


class TransientFault(ControlRequest):
    calls: int


class SecretReadsDenied(ControlRequest):
    reads: int


class Denial(ControlRequest):
    denied: bool = True


class BucketName(ControlRequest):
    name: str


class SlicePreemptLater(ControlRequest):
    cluster: str
    slice_index: int
    after_s: float
    notice_s: float = 0.0


class SliceDegradeLater(ControlRequest):
    cluster: str
    slice_index: int
    after_s: float
    health: str
    for_s: float | None = None


class SliceMaintainLater(ControlRequest):
    cluster: str
    slice_index: int
    after_s: float
    notice_s: float = 0.0
    duration_s: float = DEFAULT_MAINTENANCE_S


class NodeName(ControlRequest):
    zone: str
    node_id: str


class NodePreempt(NodeName):
    notice_s: float = 0.0


class NodeRepair(NodeName):
    duration_s: float


class NodeMaintenance(NodeName):
    after_s: float
    duration_s: float


class NodeDegrade(NodeName):
    state: NodeState | None = None
    health: str | None = None
    for_s: float | None = None


class ClusterSimulation(ControlRequest):
    """A cluster's simulated latencies, VM image and boot delay (its spec's `simulation`)."""

    cluster: str
    create_latency_s: float
    delete_latency_s: float
    vm_image: str = DEFAULT_VM_IMAGE
    boot_delay_s: float = 0.0
    instance_create_latency_s: float = INSTANCE_CREATE_S
    instance_delete_latency_s: float = INSTANCE_DELETE_S


class ClusterName(ControlRequest):
    cluster: str


class ControllerHalt(ControlRequest):
    cluster: str
    state: str  # TERMINATED or SUSPENDED


class MethodsAsked(ControlRequest):
    methods: list[str] | None = None  # only these methods' entries; every one when None


class ProjectChange(ControlRequest):
    """What the console would do to the project (`podmanager sim project`)."""

    kind: str | None = None
    grant: str | None = None
    revoke: str | None = None
    member: str | None = None
    enable: list[str] | None = None


class LoggedRequest(TypedDict):
    """One API request the emulator received: its method and its message (or a REST call's
    parameters and body) as Google's JSON."""

    method: str
    request: dict[str, JsonValue]


class IamCall(TypedDict):
    """One call the project's IAM checked (`iam/gate.py`)."""

    method: str
    principal: str
    resource: str
    denied: str | None


Request = TypeVar("Request", bound=ControlRequest)
Reply = TypeVar("Reply")


@dataclass(frozen=True)
class ControlVerb(Generic[Request, Reply]):
    name: str
    request: type[Request]
    reply: TypeAdapter[Reply]

    def reply_json(self, value: Reply) -> Any:
        return self.reply.dump_python(value, mode="json")

    def read_reply(self, data: Any) -> Reply:
        return self.reply.validate_python(data)


_NONE: TypeAdapter[None] = TypeAdapter(None)
_NAME_OR_NONE: TypeAdapter[str | None] = TypeAdapter(str | None)

# Faults and changes of the simulated cloud.
FAULT = ControlVerb("fault", FaultText, _NONE)
INJECT_CREATE_FAULT = ControlVerb("inject_create_fault", CreateFault, _NONE)
INJECT_QUOTA = ControlVerb("inject_quota", QuotaFault, _NONE)
INJECT_TRANSIENT = ControlVerb("inject_transient", TransientFault, _NONE)
DENY_SECRET_READS = ControlVerb("deny_secret_reads", SecretReadsDenied, _NONE)
DENY_FIREWALL_CHANGES = ControlVerb("deny_firewall_changes", Denial, _NONE)
CREATE_BUCKET = ControlVerb("create_bucket", BucketName, _NONE)
DELETE_BUCKET = ControlVerb("delete_bucket", BucketName, _NONE)
DENY_BUCKET_IAM_CHANGES = ControlVerb("deny_bucket_iam_changes", Denial, _NONE)
CLEAR_FAULTS = ControlVerb("clear_faults", NoArgs, _NONE)
PREEMPT_SLICE_LATER = ControlVerb("preempt_slice_later", SlicePreemptLater, _NONE)
DEGRADE_SLICE_LATER = ControlVerb("degrade_slice_later", SliceDegradeLater, _NONE)
MAINTAIN_SLICE_LATER = ControlVerb("maintain_slice_later", SliceMaintainLater, _NONE)
PREEMPT = ControlVerb("preempt", NodePreempt, _NONE)
REPAIR = ControlVerb("repair", NodeRepair, _NONE)
SCHEDULE_MAINTENANCE = ControlVerb("schedule_maintenance", NodeMaintenance, _NONE)
TERMINATE = ControlVerb("terminate", NodeName, _NONE)
DEGRADE = ControlVerb("degrade", NodeDegrade, _NONE)
CONFIGURE_CLUSTER = ControlVerb("configure_cluster", ClusterSimulation, _NONE)
# The emulator's VMs and project (`server.py::Emulator`).
CRASH_CONTROLLER_VM = ControlVerb("crash_controller_vm", ClusterName, _NAME_OR_NONE)
HALT_CONTROLLER_VM = ControlVerb("halt_controller_vm", ControllerHalt, _NAME_OR_NONE)
PROJECT = ControlVerb("project", ProjectChange, TypeAdapter(ProjectPolicy))
MOVE_LAPTOP = ControlVerb("move_laptop", NoArgs, TypeAdapter(str))
IAM_CALLS = ControlVerb("iam_calls", MethodsAsked, TypeAdapter(list[IamCall]))
# Reads of the simulator's own view (no API call: no injected fault hits them), as the client's records.
ALL_NODES = ControlVerb("all_nodes", NoArgs, TypeAdapter(list[Node]))
ALL_QUEUED_RESOURCES = ControlVerb("all_queued_resources", NoArgs, TypeAdapter(list[QueuedResource]))
ALL_INSTANCES = ControlVerb("all_instances", NoArgs, TypeAdapter(list[Instance]))
KNOWN_ZONES = ControlVerb("known_zones", NoArgs, TypeAdapter(list[str]))
VERSION = ControlVerb("version", NoArgs, TypeAdapter(int))
PENDING_FAULTS = ControlVerb("pending_faults", NoArgs, TypeAdapter(Faults))
REQUESTS = ControlVerb("requests", MethodsAsked, TypeAdapter(list[LoggedRequest]))

VERBS: dict[str, ControlVerb[Any, Any]] = {verb.name: verb for verb in (
    FAULT, INJECT_CREATE_FAULT, INJECT_QUOTA, INJECT_TRANSIENT, DENY_SECRET_READS, DENY_FIREWALL_CHANGES,
    CREATE_BUCKET, DELETE_BUCKET, DENY_BUCKET_IAM_CHANGES, CLEAR_FAULTS, PREEMPT_SLICE_LATER, DEGRADE_SLICE_LATER,
    MAINTAIN_SLICE_LATER, PREEMPT, REPAIR, SCHEDULE_MAINTENANCE, TERMINATE, DEGRADE, CONFIGURE_CLUSTER,
    CRASH_CONTROLLER_VM, HALT_CONTROLLER_VM, PROJECT, MOVE_LAPTOP, IAM_CALLS,
    ALL_NODES, ALL_QUEUED_RESOURCES, ALL_INSTANCES, KNOWN_ZONES, VERSION, PENDING_FAULTS, REQUESTS,
)}


def verb_named(method: str) -> ControlVerb[Any, Any]:
    """The verb `method` names; a ValueError listing the known ones when none is."""
    verb = VERBS.get(method)
    if verb is None:
        raise ValueError(f"unknown control method {method!r}; known: {', '.join(sorted(VERBS))}")
    return verb
