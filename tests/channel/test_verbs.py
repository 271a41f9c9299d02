"""podmanager/channel/verbs.py: one table drives both ends of the channel. Every verb has the
controller's handler and the client's call, and each of its records arrives as it was sent,
through the real server and client (the API an echo served in-process; no Ray)."""

from __future__ import annotations

import dataclasses
import inspect
import typing

import pytest

from podmanager.channel import identity, records
from podmanager.channel.cluster_status import (
    ClusterStatus,
    HostStatus,
    ServiceEndpoint,
    SliceStatus,
)
from podmanager.channel.run_status import RunStatus
from podmanager.channel.server import ChannelServer
from podmanager.channel.service_summary import (
    ReplicaIncident,
    ReplicaState,
    ServiceSummary,
)
from podmanager.channel.verbs import VERBS, Call, ChannelVerbs, Verb
from podmanager.client import pinned
from podmanager.client.channel_client import ChannelClient
from podmanager.controller.daemon.channel_service import ControllerChannelApi
from podmanager.core import faults
from podmanager.core.run_results import RunProgress, RunResult
from podmanager.core.workload import Workload

CLUSTER = "c1"
WORKLOAD = Workload(entrypoint="train.py", args=["--steps", "3"], env={"A": "b"}, working_dir=".", min_slices=1)
RUN = RunStatus(run_id="r1", cluster=CLUSTER, workload=WORKLOAD, slices=[0, 1], budgets={"preemption": 2},
                checkpoint_dir="gs://b/c", status="succeeded", attempt=1, progress=RunProgress(step=3, steps_per_s=1.5),
                result=RunResult.without_attempts("r1", CLUSTER, "succeeded", "run r1 succeeded"),
                cancel_requested=True, warnings=["w"], created_at=1.0, updated_at=2.0)
STATUS = ClusterStatus(
    name=CLUSTER, backend="simulated", project="demo",
    slices=[SliceStatus(index=0, name="c1-s0", accelerator="v4-8", zone="z", state="READY", hosts=1, chips=4,
                        boot=["joined"], spare=True)],
    hosts=[HostStatus(slice_index=0, node_name="c1-s0", worker_id=0, ip="10.0.0.2", chips=4, healthy=True,
                      last_heartbeat=1.5, ray_node_id="n", detail="ok", state="healthy", boot="joined",
                      versions={"ray": "2.50.0"})],
    services=[ServiceEndpoint(service_id="svc-1", endpoint="http://127.0.0.1:9", slices=[0])], head_problem="x")
SERVICE = ServiceSummary(
    run_id="svc-1", cluster=CLUSTER, status="serving", message="m", program="model.py", endpoint="e", slices=2,
    replicas=[ReplicaState(replica=0, run_id="r0", state="ready", attempt=1, served=3, step=400)],
    requests=5, served=4, failures=1, rejected=0, p50_ms=1.5, p99_ms=None, goodput=0.5, started=2.0,
    incidents=[ReplicaIncident(attempt=0, cause="preemption", slices=[0], detail="d", detected_at=3.0, detect_s=None,
                               recover_s=1.0, lost_steps=2, phases={"stop": 0.5}, replica=0)])
EVENT = records.EventRecord(id=7, time=1.0, kind="slice_ready", slice_index=0, message="ready",
                            data={"zones": ["a"], "n": 2})
JOB = records.JobReply(job_id="up-1", verb="up", started_at=1.0, done=True, status=STATUS,
                       plan=records.PlanReply(cluster=CLUSTER, summary="create 1", spares="1 spare"),
                       error=records.ErrorReply(message="no", hint="fix", exit_code=2))

# One of each record the table names, every field away from its default where it has one.
SAMPLES: dict[type, object] = {
    records.StatusRequest: records.StatusRequest(cluster=CLUSTER),
    records.EventsRequest: records.EventsRequest(cluster=CLUSTER, after_id=41),
    records.UpRequest: records.UpRequest(cluster=CLUSTER, spec_yaml="name: c1\n", dry_run=True, timeout_s=5.0,
                                         force=True, delete_on_failure=True),
    records.DownRequest: records.DownRequest(cluster=CLUSTER, timeout_s=9.0),
    records.JobRequest: records.JobRequest(job_id="up-1"),
    bytes: b"PK\x05\x06" + bytes(18),
    records.SubmitRequest: records.SubmitRequest(cluster=CLUSTER, workload=WORKLOAD, code="d1", budgets={"a": 1}),
    records.WatchRequest: records.WatchRequest(cluster=CLUSTER, run_id="r1", after_event=3,
                                               offsets={"slice-0/host-0": 10}, host="slice-0/host-0", live_bytes=9),
    records.RunRequest: records.RunRequest(cluster=CLUSTER, run_id="r1"),
    records.ServeRequest: records.ServeRequest(cluster=CLUSTER, workload=WORKLOAD, code="d1", budgets={"a": 1},
                                               replicas=2, queue_timeout_s=3.0, follow_checkpoints=True),
    records.ServiceRequest: records.ServiceRequest(cluster=CLUSTER, service_id="svc-1"),
    records.FaultRequest: records.FaultRequest(cluster=CLUSTER, fault=faults.parse("preempt:0")),
    ClusterStatus: STATUS,
    records.EventsReply: records.EventsReply(events=[EVENT]),
    records.SpecReply: records.SpecReply(spec_json='{"name": "c1"}'),
    records.JobReply: JOB,
    records.CodeReply: records.CodeReply(digest="d1"),
    records.RunReply: records.RunReply(run=RUN),
    records.WatchReply: records.WatchReply(run=RUN, events=[EVENT], output=[records.HostOutput(
        host="slice-0/host-0", slice_index=0, worker_id=0, text="hi\n", offset=3, skipped=1, path="/p")]),
    records.RunsReply: records.RunsReply(runs=[RUN]),
    records.ServiceReply: records.ServiceReply(service=SERVICE),
    records.ServicesReply: records.ServicesReply(services=[SERVICE]),
    records.FaultReply: records.FaultReply(said="preempted slice 0"),
}


def test_every_verb_has_a_unique_path_a_handler_and_a_client_call() -> None:
    assert len({(v.method, v.path) for v in VERBS}) == len(VERBS) == len({v.name for v in VERBS})
    assert all(v.path.startswith(f"/v{records.WIRE_VERSION}/") for v in VERBS)
    for verb in VERBS:
        handler = getattr(ControllerChannelApi, verb.name, None)
        assert handler is not None, f"the controller's API has no handler of {verb.name}"
        hints = typing.get_type_hints(handler)
        takes = [hints[p] for p in list(inspect.signature(handler).parameters)[1:]]
        assert takes == [verb.request] and hints["return"] is verb.reply, verb.name
        assert getattr(ChannelClient, verb.name) is verb  # the class reads the table's entry itself


class Echo:
    """Every verb answers its sample reply and keeps the request it was given."""

    def __init__(self) -> None:
        self.asked: dict[str, object] = {}

    def __getattr__(self, name: str):
        verb = getattr(ChannelVerbs, name)

        def handle(request: object) -> object:
            self.asked[name] = request
            return SAMPLES[verb.reply]
        return handle


@pytest.fixture
def client():
    echo = Echo()
    made = identity.load_or_create(CLUSTER, identity.controller_address(simulated=True))
    with ChannelServer(echo, made) as server:
        pinned.install(CLUSTER, pinned.ControllerAddress(host=server.host, port=server.port), made.cert_pem(),
                       made.token())
        with ChannelClient.for_cluster(CLUSTER) as found:
            yield found, echo


@pytest.mark.parametrize("verb", VERBS, ids=[v.name for v in VERBS])
def test_each_verbs_request_and_reply_cross_as_they_were_sent(client, verb: Verb) -> None:
    channel, echo = client
    call = getattr(channel, verb.name)
    assert isinstance(call, Call)
    sent = SAMPLES[verb.request]
    reply = call(sent)
    assert echo.asked[verb.name] == sent and type(echo.asked[verb.name]) is verb.request
    assert reply == SAMPLES[verb.reply] and type(reply) is verb.reply


def test_a_call_takes_its_requests_fields_in_the_records_order(client) -> None:
    channel, echo = client
    channel.events(CLUSTER, after_id=41)
    channel.cancel(CLUSTER, "r1")
    assert echo.asked["events"] == records.EventsRequest(cluster=CLUSTER, after_id=41)
    assert echo.asked["cancel"] == records.RunRequest(cluster=CLUSTER, run_id="r1")


@pytest.mark.parametrize("record", [r for r in SAMPLES.values() if not isinstance(r, bytes)],
                         ids=[t.__name__ for t, r in SAMPLES.items() if not isinstance(r, bytes)])
def test_each_record_round_trips_through_its_json(record) -> None:
    assert type(record).model_validate_json(record.model_dump_json()) == record


def test_every_record_the_table_names_has_a_sample() -> None:
    named = {v.request for v in VERBS} | {v.reply for v in VERBS}
    assert named == set(SAMPLES)


def _fields(kind: type) -> dict[str, object]:
    """A model's (or a dataclass's) fields and their types."""
    if dataclasses.is_dataclass(kind):
        return typing.get_type_hints(kind)
    return {name: info.annotation for name, info in getattr(kind, "model_fields", {}).items()}


def test_no_record_on_the_wire_holds_an_untyped_field() -> None:
    """Every record the table names, and every record inside one, types each field: no `Any`
    (a `dict[str, Any]` would carry whatever its writer put in)."""
    untyped, seen = [], set()
    todo: list[type] = [t for v in VERBS for t in (v.request, v.reply) if t is not bytes]
    while todo:
        kind = todo.pop()
        if kind in seen:
            continue
        seen.add(kind)
        for name, annotation in _fields(kind).items():
            stack = [annotation]
            while stack:
                part = stack.pop()
                if part is typing.Any:
                    untyped.append(f"{kind.__name__}.{name}")
                stack.extend(typing.get_args(part))
                if isinstance(part, type) and _fields(part):
                    todo.append(part)
    assert untyped == []
    assert {RunStatus, ServiceSummary, ReplicaIncident, HostStatus, Workload, RunResult} <= seen  # the walk went inside
    # The store's rows stay the store's: what crosses is declared for the wire (or in core/).
    stored = sorted(f"{kind.__module__}.{kind.__name__}" for kind in seen
                    if kind.__module__.startswith("podmanager.state"))
    assert stored == []
