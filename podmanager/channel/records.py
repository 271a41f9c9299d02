"""What crosses the channel: one typed request and one typed reply per verb, and the error reply.

JSON over HTTPS, validated on both ends. Versioned by the URL (`/v1/...`): a reply gains fields
with defaults, never loses one, so an older client reads a newer controller's replies."""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from podmanager.channel.cluster_status import ClusterStatus
from podmanager.channel.run_status import RunStatus
from podmanager.channel.service_summary import ServiceSummary
from podmanager.core.faults import Fault
from podmanager.core.workload import Workload

WIRE_VERSION = 1  # a reply gains fields with defaults, never loses one; a change that breaks that is v2
API_PREFIX = f"/v{WIRE_VERSION}"
FORWARD_PATH = f"{API_PREFIX}/forward"  # a WebSocket carrying one TCP connection to the controller's side
CALLER_PATH = f"{API_PREFIX}/caller"  # GET: the caller's address as the controller sees it (`access add`)
DASHBOARD = "dashboard"  # a forward's target: the Ray dashboard (and job API), or a service's id


class Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")  # ignore: a newer controller may add fields


# Every id, offset and count fits SQLite's INTEGER (signed 64 bits), and every time is finite.
INT64_MAX = (1 << 63) - 1


def number_problem(value: object, where: str = "") -> str | None:
    """The first number of a request that no field of the controller's can take, as
    "field: why", or None. JSON allows both: 1e400 reads as infinity, and an integer of any
    length reads as a Python int; pydantic checks neither (nor does `Workload`, nested)."""
    if isinstance(value, BaseModel):
        value = value.model_dump()
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return f"{where or 'the body'}: {value} is not a finite number"
    if isinstance(value, int) and not -INT64_MAX - 1 <= value <= INT64_MAX:
        return f"{where or 'the body'}: {value} is out of range (at most {INT64_MAX})"
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        problem = number_problem(item, f"{where}.{key}" if where else str(key))
        if problem is not None:
            return problem
    return None


class StatusRequest(Record):
    cluster: str = Field(min_length=1)


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


class CallerReply(Record):
    """The address an authenticated request came from, as the controller saw it: the caller's
    public one when it is behind a NAT (docs/channel.md, "Reaching the controller from another
    laptop")."""

    address: str


class ErrorReply(Record):
    """Any refusal or failure: the message a person reads, the fix, and the exit code the
    client's command ends with (as if the error had happened on the client)."""

    message: str
    hint: str | None = None
    exit_code: int = 1


# ---------------------------------------------------------------------- up and down

class UpRequest(Record):
    """`up` of the spec, run on the controller as a job of its own (it outlives the request and
    the client's connection: a laptop that sleeps does not stop it)."""

    cluster: str = Field(min_length=1)
    spec_yaml: str = Field(min_length=1)  # the spec as the user wrote it; the controller runs it locally
    dry_run: bool = False  # `up --dry-run`: the simulated backend, whatever the spec says
    timeout_s: float = Field(gt=0)
    force: bool = False
    delete_on_failure: bool = False


class DownRequest(Record):
    cluster: str = Field(min_length=1)
    timeout_s: float = Field(default=600.0, gt=0)


class SpecReply(Record):
    """The spec as the user's `up` gave it, for another machine of theirs (`connect`)."""

    spec_json: str


class JobRequest(Record):
    job_id: str = Field(min_length=1)


class JobReply(Record):
    """A verb the controller runs for a client (`up`, `down`): running, or how it ended."""

    job_id: str
    verb: str
    started_at: float = 0.0  # on the controller's clock: its events from then on are the job's
    done: bool = False
    error: ErrorReply | None = None
    status: ClusterStatus | None = None  # `up`'s, once it succeeded
    plan: PlanReply | None = None  # `up`'s plan, once made


class PlanReply(Record):
    """What `up` does to the cloud (`api/up_plan.py::UpPlan`), as a person reads it."""

    cluster: str
    summary: str
    spares: str | None = None


# ---------------------------------------------------------------------- runs

class CodeReply(Record):
    """A working dir received as a zip, kept on the controller by its content's SHA-256."""

    digest: str


class SubmitRequest(Record):
    cluster: str = Field(min_length=1)
    workload: Workload  # working_dir: None, or "." for the code named by `code`
    code: str | None = None  # the CodeReply.digest of the working dir's zip
    budgets: dict[str, int] = {}


class RunRequest(Record):
    cluster: str = Field(min_length=1)
    run_id: str = Field(min_length=1)


class WatchRequest(Record):
    """What a follower has seen of one run: its events up to `after_event`, and of each host's
    log the bytes up to `offsets[label]`. `host`: one host's log only (`logs --host`)."""

    cluster: str = Field(min_length=1)
    run_id: str | None = None  # None: the cluster's latest run
    after_event: int = Field(default=0, ge=0)
    offsets: dict[str, int] = {}
    host: str | None = None
    live_bytes: int | None = Field(default=None, gt=0)  # a follower keeping up: at most this much per host


class HostOutput(Record):
    host: str  # slice-S/W, as `core.selectors` reads it
    slice_index: int
    worker_id: int
    text: str
    offset: int  # where the next read of this host starts
    skipped: int = 0  # whole lines left out to keep within `live_bytes`
    path: str = ""  # the log file on the controller, for a person reading there


class WatchReply(Record):
    """The run's record, read before its output (so nothing written before its end is missed),
    then its events and every host's output since what the request had seen."""

    run: RunStatus
    events: list[EventRecord] = []
    output: list[HostOutput] = []


class RunReply(Record):
    run: RunStatus


class RunsReply(Record):
    runs: list[RunStatus]


# ---------------------------------------------------------------------- services

class ServeRequest(Record):
    """`serve` of a program: as `SubmitRequest`, and how it is served. The router listens on
    the controller's loopback; the user reaches it through a forward (`/v1/forward`)."""

    cluster: str = Field(min_length=1)
    workload: Workload
    code: str | None = None
    budgets: dict[str, int] = {}
    replicas: int | None = None
    queue_timeout_s: float = 60.0
    follow_checkpoints: bool = False


class ServiceRequest(Record):
    cluster: str = Field(min_length=1)
    service_id: str = Field(min_length=1)


class ServiceReply(Record):
    service: ServiceSummary


class ServicesReply(Record):
    services: list[ServiceSummary]


# ---------------------------------------------------------------------- a dry run's faults

class FaultRequest(Record):
    """`podmanager sim` of a cluster whose controller is a VM: the controller injects the fault
    as `sim` next to it would (its cluster's Ray side, its event log)."""

    cluster: str = Field(min_length=1)
    fault: Fault


class FaultReply(Record):
    said: str  # what happened, for the user
