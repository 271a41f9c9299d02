"""What crosses the channel: one typed request and one typed reply per verb, and the error reply.

JSON over HTTPS, validated on both ends. Versioned by the URL (`/v1/...`): a reply gains fields
with defaults, never loses one, so an older client reads a newer controller's replies."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, JsonValue

API_PREFIX = "/v1"
STATUS_PATH = f"{API_PREFIX}/status"
EVENTS_PATH = f"{API_PREFIX}/events"


class Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")  # ignore: a newer controller may add fields


class StatusRequest(Record):
    cluster: str = Field(min_length=1)


class SliceState(Record):
    """One slice of the spec as the cloud last reported it (`api/status.py::SliceStatus`)."""

    index: int
    name: str
    accelerator: str
    zone: str | None
    state: str  # the node's state, or MISSING
    hosts: int
    chips: int
    boot: list[str] = []  # each worker's boot stage ("" not yet)
    spare: bool = False


class HostState(Record):
    """One host as the cluster's monitor last probed it (`controller/host_info.py::HostInfo`)."""

    slice_index: int
    node_name: str
    worker_id: int
    ip: str | None
    chips: int
    healthy: bool
    last_heartbeat: float | None
    ray_node_id: str | None
    detail: str
    state: str
    boot: str = ""
    versions: dict[str, str] = {}


class RayEndpoint(Record):
    """Where the cluster's Ray head listens, as the controller sees it. Not its token's path nor
    the exports (`RayAccess`): those name the controller's files, which a client never reads."""

    address: str
    dashboard_url: str | None


class ServiceEndpointState(Record):
    service_id: str
    endpoint: str
    slices: list[int]


class StatusReply(Record):
    """`status` of one cluster, as `api/status.py::ClusterStatus` holds it on the controller."""

    name: str
    backend: str
    project: str
    slices: list[SliceState]
    hosts: list[HostState] = []
    ray: RayEndpoint | None = None
    hosts_observed_at: float | None = None
    services: list[ServiceEndpointState] = []
    slices_observed_at: float | None = None
    head_problem: str | None = None


class EventsRequest(Record):
    cluster: str = Field(min_length=1)
    after_id: int = Field(default=0, ge=0)  # only events newer than this one (a follower's cursor)


class EventRecord(Record):
    id: int
    time: float
    kind: str
    slice_index: int | None
    message: str
    data: dict[str, JsonValue] = {}  # what the event log keeps beside the message: JSON by construction


class EventsReply(Record):
    events: list[EventRecord]


class ErrorReply(Record):
    """Any refusal or failure: the message a person reads, the fix, and the exit code the
    client's command ends with (as if the error had happened on the client)."""

    message: str
    hint: str | None = None
    exit_code: int = 1
