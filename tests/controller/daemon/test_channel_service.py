"""controller/daemon/channel_service.py: the controller answers the channel's requests with its own API, in the
channel's records, and a Ray address's token path or exports (the controller's files) never
cross. No Ray: status is the `ClusterStatus` built here, events come from SQLite."""

from __future__ import annotations

import threading
import types

import pytest

from podmanager.channel import identity, records
from podmanager.channel.cluster_status import (
    ClusterStatus,
    HostStatus,
    ServiceEndpoint,
    SliceStatus,
)
from podmanager.channel.errors import RemoteError
from podmanager.channel.server import ChannelServer
from podmanager.client import pinned
from podmanager.client.channel_client import ChannelClient
from podmanager.controller.daemon.channel_service import ControllerChannelApi
from podmanager.controller.host_info import HEALTHY, HostInfo
from podmanager.core.errors import ClusterNotFoundError
from podmanager.core.events import EventKind
from podmanager.core.records import RayAccess
from podmanager.core.spec import parse_spec
from podmanager.state import StateStore


def events_of(api: ControllerChannelApi, cluster: str, after_id: int) -> records.EventsReply:
    return api.events(records.EventsRequest(cluster=cluster, after_id=after_id))


def job_of(api: ControllerChannelApi, job_id: str) -> records.JobReply:
    return api.job(records.JobRequest(job_id=job_id))


def test_a_cluster_status_crosses_as_it_is_without_the_controllers_paths() -> None:
    host = HostInfo(slice_index=0, node_name="c1-s0", worker_id=0, ip="10.0.0.2", chips=4, healthy=True,
                    last_heartbeat=12.5, ray_node_id="n1", detail="ok", state=HEALTHY)
    status = ClusterStatus(
        name="c1", backend="simulated", project="demo",
        slices=[SliceStatus(index=0, name="c1-s0", accelerator="v4-8", zone="z", state="READY", hosts=1, chips=4,
                            boot=["joined"], spare=False)],
        hosts=[HostStatus(**host.model_dump(), boot="joined", versions={"ray": "2.50.0"})],
        ray=RayAccess("127.0.0.1:6379", "http://127.0.0.1:8265", "/home/u/.podmanager/clusters/c1/ray_token",
                      {"RAY_ADDRESS": "127.0.0.1:6379", "RAY_AUTH_TOKEN_PATH": "/home/u/.podmanager/clusters/c1/ray_token"}),
        hosts_observed_at=13.0, services=[ServiceEndpoint(service_id="svc-1", endpoint="http://127.0.0.1:9000", slices=[0])],
        slices_observed_at=14.0, head_problem="the head is restarting")

    sent = status.for_the_wire().model_dump_json()
    reply = ClusterStatus.model_validate_json(sent)  # as the client reads it

    assert reply == status.model_copy(update={"ray": None})
    assert reply.hosts[0].model_dump() == {**host.model_dump(), "boot": "joined", "versions": {"ray": "2.50.0"}}
    assert "ray_token" not in sent and "6379" not in sent


def test_events_are_read_from_the_store_after_a_cursor_and_an_unknown_cluster_is_refused() -> None:
    store = StateStore()
    first = store.add_event("c1", EventKind.SLICE_CREATING, "created c1-s0", slice_index=0, zone="z")
    store.add_event("c1", EventKind.SLICE_READY, "c1-s0 is READY", slice_index=0)
    api = ControllerChannelApi(store)

    assert [(e.kind, e.data) for e in events_of(api, "c1", 0).events] == [("slice_creating", {"zone": "z"}),
                                                                      ("slice_ready", {})]
    assert [e.kind for e in events_of(api, "c1", first.id).events] == ["slice_ready"]
    with pytest.raises(ClusterNotFoundError, match="no cluster named 'nope'"):
        events_of(api, "nope", 0)


def test_the_channel_serves_the_controllers_event_log() -> None:
    store = StateStore()
    store.add_event("c1", EventKind.SLICE_CREATING, "created c1-s0", slice_index=0)
    made = identity.load_or_create("c1", identity.controller_address(simulated=True))
    with ChannelServer(ControllerChannelApi(store), made) as server:
        credentials = pinned.install("c1", pinned.ControllerAddress(host=server.host, port=server.port),
                                     made.cert_pem(), made.token())
        with ChannelClient(credentials) as client:
            assert [e.message for e in client.events("c1").events] == ["created c1-s0"]
            with pytest.raises(RemoteError) as unknown:
                client.events("nope")
    assert unknown.value.exit_code == 2 and "no cluster named 'nope'" in unknown.value.message


class OneDriverCluster:
    """`Cluster` on the controller as far as taking turns goes: an `up` holds the process's one
    Ray driver until the test lets it finish; a second `up` inside it fails as Ray's driver did
    (issue 43: a raw AttributeError when two `up`s shared, and one shut down, the connection)."""

    running: list[str] = []
    finished: list[str] = []
    first_inside = threading.Event()
    let_finish = threading.Event()

    def __init__(self, spec, *, store) -> None:
        self.spec, self.name = spec, spec.name
        self.runtime = types.SimpleNamespace(close_cloud=lambda: None)

    @classmethod
    def from_name(cls, name: str, *, store: StateStore) -> OneDriverCluster:
        return cls(store.get_cluster(name).spec, store=store)

    def up(self, *, timeout_s: float, **options) -> ClusterStatus:
        if self.running:
            raise AttributeError("'NoneType' object has no attribute 'address_info'")
        self.running.append(self.name)
        self.first_inside.set()
        try:
            assert self.let_finish.wait(timeout=60)
        finally:
            self.running.remove(self.name)
        self.finished.append(self.name)
        return ClusterStatus(name=self.name, backend="simulated", project="podmanager-sim", slices=[])

    def close(self) -> None:
        pass


SPEC_YAML = "name: c1\nbackend: simulated\nslices: [{accelerator: v4-8}]\n"


@pytest.mark.parametrize("first", ["a client's up", "the controller's own up after a crash"])
def test_two_ups_of_one_cluster_on_the_controller_take_turns_the_second_saying_whom_it_waits_for(
        first, monkeypatch) -> None:
    import yaml

    from podmanager.controller.daemon import channel_service
    from podmanager.core.clock import poll_until

    monkeypatch.setattr(channel_service, "Cluster", OneDriverCluster)
    monkeypatch.setattr(OneDriverCluster, "running", [])
    monkeypatch.setattr(OneDriverCluster, "finished", [])
    monkeypatch.setattr(OneDriverCluster, "first_inside", threading.Event())
    monkeypatch.setattr(OneDriverCluster, "let_finish", threading.Event())
    store = StateStore()
    api = ControllerChannelApi(store)
    up = records.UpRequest(cluster="c1", spec_yaml=SPEC_YAML, timeout_s=60)
    if first == "a client's up":
        one = api.start_up(up)
    else:  # the controller booted again: it brings back the cluster it holds
        store.save_cluster("c1", parse_spec(yaml.safe_load(SPEC_YAML)), "up")
        one = api.resume("c1")
    assert one is not None and OneDriverCluster.first_inside.wait(timeout=30)
    two = api.start_up(up)

    def said_or_done() -> bool:
        return bool(store.events("c1", kind=EventKind.WAITING)) or job_of(api, two.job_id).done
    poll_until(said_or_done, timeout_s=30, interval_s=0.01, what="the second up to wait or end")
    assert not job_of(api, two.job_id).done and OneDriverCluster.finished == []
    [waiting] = store.events("c1", kind=EventKind.WAITING)
    assert waiting.message == f"waiting for the controller's {one.job_id} of c1 to finish"

    OneDriverCluster.let_finish.set()
    poll_until(lambda: job_of(api, one.job_id).done and job_of(api, two.job_id).done, timeout_s=30, interval_s=0.01,
               what="both ups to end")
    for job in (one, two):
        done = job_of(api, job.job_id)
        assert done.error is None and done.status is not None and done.status.name == "c1"
    assert OneDriverCluster.finished == ["c1", "c1"]  # one after the other, neither inside the other


def test_an_up_that_waits_longer_than_its_timeout_says_which_job_it_waited_for(monkeypatch) -> None:
    from podmanager.controller.daemon import channel_service
    from podmanager.core.clock import poll_until

    monkeypatch.setattr(channel_service, "Cluster", OneDriverCluster)
    monkeypatch.setattr(OneDriverCluster, "running", [])
    monkeypatch.setattr(OneDriverCluster, "finished", [])
    monkeypatch.setattr(OneDriverCluster, "first_inside", threading.Event())
    monkeypatch.setattr(OneDriverCluster, "let_finish", threading.Event())
    api = ControllerChannelApi(StateStore())
    one = api.start_up(records.UpRequest(cluster="c1", spec_yaml=SPEC_YAML, timeout_s=60))
    assert OneDriverCluster.first_inside.wait(timeout=30)
    two = api.start_up(records.UpRequest(cluster="c1", spec_yaml=SPEC_YAML, timeout_s=0.1))
    try:
        poll_until(lambda: job_of(api, two.job_id).done, timeout_s=30, interval_s=0.01, what="the second up to give up")
    finally:
        OneDriverCluster.let_finish.set()
    error = job_of(api, two.job_id).error
    assert error is not None and error.message == f"the controller's {one.job_id} of c1 still runs after 0s"
    assert "podmanager events -c c1" in (error.hint or "")
    poll_until(lambda: job_of(api, one.job_id).done, timeout_s=30, interval_s=0.01, what="the first up to end")
    assert job_of(api, one.job_id).error is None


def test_a_fault_sent_over_the_channel_is_injected_by_the_controllers_own_cluster(monkeypatch) -> None:
    """`podmanager sim` of a cluster whose controller is a VM: the controller injects it, as `sim`
    next to it would (its hosts, its event log); the laptop builds no cluster of its own."""
    from podmanager.controller.daemon import channel_service
    from podmanager.core import faults

    injected: list[tuple[str, str]] = []

    class Faulty:
        def __init__(self, name: str) -> None:
            self.name = name

        @classmethod
        def from_name(cls, name: str, *, store: StateStore) -> Faulty:
            return cls(name)

        def inject(self, fault: faults.FaultKind) -> str:
            injected.append((self.name, fault.text()))
            return "preempting c1-s0"

    monkeypatch.setattr(channel_service, "Cluster", Faulty)
    api = ControllerChannelApi(StateStore())
    sent = records.FaultRequest(cluster="c1", fault=faults.parse("preempt:0"))
    reply = api.fault(records.FaultRequest.model_validate_json(sent.model_dump_json()))  # as the channel carries it
    assert reply.said == "preempting c1-s0" and injected == [("c1", "preempt:0:0:0")]
