"""emulator/tpu_api.py: UpdateNode (metadata) and GetGuestAttributes, through `GcpCloud` and the real
`TpuClient` against the emulator, one FakeClock driving the simulator and the client's polls; below,
lists paged as the Cloud TPU API pages them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import pytest
from google.api_core import exceptions as google_exceptions
from google.cloud.tpu_v2 import TpuClient
from google.cloud.tpu_v2.services.tpu.transports import TpuGrpcTransport
from google.cloud.tpu_v2.types import cloud_tpu
from google.protobuf import field_mask_pb2

from podmanager.cloud import errors
from podmanager.cloud.base import CLUSTER_LABEL, GuestAttribute, NodeRequest, NodeState
from podmanager.cloud.gcp.calls import call_google
from podmanager.cloud.gcp.client import GcpCloud
from podmanager.cloud.gcp.errors import map_call_error
from podmanager.cloud.retry import RetryingCloud
from podmanager.core.clock import FakeClock
from podmanager.core.spec import Capacity
from podmanager.emulator.sim.cloud import SimCloud
from podmanager.emulator.sim.records import SimState
from podmanager.emulator.tpu_api import MAX_PAGE_SIZE, TpuEmulator

ZONE = "us-central2-b"
NODE = f"projects/my-project/locations/{ZONE}/nodes/demo-s0"
METADATA = {"startup-script": "#!/bin/bash\necho hi", "podmanager-token-secret": "podmanager-demo-ray-token"}


@dataclass
class Rig:
    clock: FakeClock
    sim: SimCloud
    cloud: GcpCloud
    tpu: TpuClient  # the raw client, for requests GcpCloud never sends


@pytest.fixture
def rig() -> Iterator[Rig]:
    clock = FakeClock()
    sim = SimCloud("my-project", clock=clock, create_latency_s=12.0, delete_latency_s=3.0)
    server, port = TpuEmulator(sim).serve()
    address = f"127.0.0.1:{port}"
    cloud = GcpCloud("my-project", emulator_host=address, clock=clock, poll_interval_s=5.0, call_timeout_s=10.0)
    tpu = TpuClient(transport=TpuGrpcTransport(channel=grpc.insecure_channel(address)))
    try:
        yield Rig(clock, sim, cloud, tpu)
    finally:
        tpu.transport.close()
        cloud.close()
        server.stop(grace=None).wait()


def create(rig: Rig, accelerator: str = "v4-16", capacity: Capacity = Capacity.ON_DEMAND, *, wait: bool = True) -> None:
    request = NodeRequest(accelerator, "tpu-ubuntu2204-base", capacity, labels={CLUSTER_LABEL: "demo"},
                          metadata=dict(METADATA))
    operation = rig.cloud.create_node(ZONE, "demo-s0", request)
    if wait:
        assert rig.cloud.wait(operation, timeout_s=60).error is None


# ---------------------------------------------------------------------- UpdateNode


def test_updating_the_metadata_changes_what_get_node_returns(rig: Rig) -> None:
    create(rig)
    changed = {**METADATA, "podmanager-head": "10.0.0.2:6379"}
    del changed["startup-script"]

    done = rig.cloud.wait(rig.cloud.update_node_metadata(ZONE, "demo-s0", changed), timeout_s=60)

    assert done.error is None
    node = rig.cloud.get_node(ZONE, "demo-s0")
    assert node.metadata == changed  # the whole map replaced, as the "metadata" mask means
    assert node.state is NodeState.READY


def test_the_update_operation_finishes_with_the_node(rig: Rig) -> None:
    create(rig)
    operation = rig.tpu.update_node(node=cloud_tpu.Node(name=NODE, metadata={"k": "v"}),
                                    update_mask=field_mask_pb2.FieldMask(paths=["metadata"]))

    node = operation.result(timeout=10)

    assert node.name == NODE and dict(node.metadata) == {"k": "v"}


@pytest.mark.parametrize("paths", [["labels"], ["metadata", "accelerator_type"], []])
def test_an_update_of_anything_but_metadata_is_refused_naming_the_field(rig: Rig, paths: list[str]) -> None:
    create(rig)

    with pytest.raises(google_exceptions.InvalidArgument) as refused:
        rig.tpu.update_node(node=cloud_tpu.Node(name=NODE, labels={"x": "y"}),
                            update_mask=field_mask_pb2.FieldMask(paths=paths))

    assert (paths[-1] if paths else "update_mask") in refused.value.message
    assert rig.cloud.get_node(ZONE, "demo-s0").metadata == METADATA


def test_a_node_not_ready_is_not_updated(rig: Rig) -> None:
    create(rig, wait=False)  # still CREATING
    failed = rig.cloud.wait(rig.cloud.update_node_metadata(ZONE, "demo-s0", {"k": "v"}), timeout_s=60)

    assert isinstance(failed.error, errors.InvalidRequestError)
    assert "not supported while in state CREATING" in str(failed.error)
    with pytest.raises(errors.NotFoundError):
        rig.cloud.update_node_metadata(ZONE, "nothing", {"k": "v"})


def test_the_retrying_wrapper_forwards_the_new_calls() -> None:
    sim = SimCloud(clock=FakeClock(), create_latency_s=0.0)
    sim.create_node(ZONE, "demo-s0", NodeRequest("v4-8", "tpu-ubuntu2204-base"))
    sim.set_guest_attribute(ZONE, "demo-s0", 0, "ns/key", "v")
    cloud = RetryingCloud(sim, clock=sim.clock)

    sim.inject_transient(1)  # the first try fails, the retry gets through
    assert cloud.update_node_metadata(ZONE, "demo-s0", {"k": "v"}).error is None
    sim.inject_transient(1)
    assert cloud.guest_attributes(ZONE, "demo-s0") == [GuestAttribute(0, "ns", "key", "v")]
    assert sim.pending_faults().transient == 0
    assert sim.get_node(ZONE, "demo-s0").metadata == {"k": "v"}


# ---------------------------------------------------------------------- guest attributes


def test_guest_attributes_come_back_per_worker_filtered_by_query_path(rig: Rig) -> None:
    create(rig)  # v4-16: workers 0 and 1
    rig.sim.set_guest_attribute(ZONE, "demo-s0", 0, "podmanager/joined", "yes")
    rig.sim.set_guest_attribute(ZONE, "demo-s0", 1, "podmanager/joined", "no")
    rig.sim.set_guest_attribute(ZONE, "demo-s0", 1, "hostkeys/ssh-ed25519", "AAAA")

    assert rig.cloud.guest_attributes(ZONE, "demo-s0") == [
        GuestAttribute(0, "podmanager", "joined", "yes"),
        GuestAttribute(1, "hostkeys", "ssh-ed25519", "AAAA"),
        GuestAttribute(1, "podmanager", "joined", "no"),
    ]
    assert rig.cloud.guest_attributes(ZONE, "demo-s0", "podmanager/") == [
        GuestAttribute(0, "podmanager", "joined", "yes"), GuestAttribute(1, "podmanager", "joined", "no")]
    assert rig.cloud.guest_attributes(ZONE, "demo-s0", "hostkeys/ssh-ed25519") == [
        GuestAttribute(1, "hostkeys", "ssh-ed25519", "AAAA")]
    assert rig.cloud.guest_attributes(ZONE, "demo-s0", "podmanager/", worker=1) == [
        GuestAttribute(1, "podmanager", "joined", "no")]
    assert rig.cloud.guest_attributes(ZONE, "demo-s0", "nothing/") == []


def test_the_response_has_one_entry_per_worker_as_the_v2_api_shapes_it(rig: Rig) -> None:
    create(rig)
    rig.sim.set_guest_attribute(ZONE, "demo-s0", 1, "podmanager/joined", "yes")

    every = rig.tpu.get_guest_attributes(request={"name": NODE, "query_path": "podmanager/"})
    asked = rig.tpu.get_guest_attributes(request={"name": NODE, "query_path": "podmanager/", "worker_ids": ["1"]})

    assert [entry.query_path for entry in every.guest_attributes] == ["podmanager/", "podmanager/"]
    assert [list(entry.query_value.items) for entry in every.guest_attributes] == [
        [], [cloud_tpu.GuestAttributesEntry(namespace="podmanager", key="joined", value="yes")]]
    assert list(asked.guest_attributes) == list(every.guest_attributes)[1:]


def test_guest_attributes_of_a_worker_or_node_that_does_not_exist_are_refused(rig: Rig) -> None:
    create(rig)
    with pytest.raises(errors.InvalidRequestError):
        rig.cloud.guest_attributes(ZONE, "demo-s0", worker=2)
    with pytest.raises(errors.NotFoundError):
        rig.cloud.guest_attributes(ZONE, "nothing")
    with pytest.raises(errors.InvalidRequestError):
        rig.sim.set_guest_attribute(ZONE, "demo-s0", 2, "podmanager/joined", "yes")
    for path in ("joined", "podmanager/", "a/b/c"):
        with pytest.raises(errors.InvalidRequestError, match="NAMESPACE/KEY"):
            rig.sim.set_guest_attribute(ZONE, "demo-s0", 0, path, "yes")


def test_guest_attributes_are_kept_in_the_saved_state_and_go_with_the_node() -> None:
    clock = FakeClock()
    writer = SimCloud(clock=clock, create_latency_s=0.0, delete_latency_s=0.0)
    writer.create_node(ZONE, "demo-s0", NodeRequest("v4-8", "tpu-ubuntu2204-base"))
    writer.set_guest_attribute(ZONE, "demo-s0", 0, "podmanager/joined", "yes")

    _, saved = writer.snapshot()  # what a restarted emulator carries on from
    reader = SimCloud(clock=clock, state=SimState.model_validate_json(saved), delete_latency_s=0.0)
    assert reader.guest_attributes(ZONE, "demo-s0") == [GuestAttribute(0, "podmanager", "joined", "yes")]

    reader.delete_node(ZONE, "demo-s0")
    clock.advance(1)
    reader.create_node(ZONE, "demo-s0", NodeRequest("v4-8", "tpu-ubuntu2204-base"))
    assert reader.guest_attributes(ZONE, "demo-s0") == []  # a new node starts with none


# Lists are paged as the Cloud TPU API pages them: the emulator honours `page_size` (at most
# `MAX_PAGE_SIZE`) and answers `next_page_token`; `GcpCloud` asks for pages and follows them, so
# a zone of 1,100 slices (a reply of about 10 MB unpaged, over gRPC's 4 MB) is listed. A reply
# too large for the client is an error that says so, not a rate limit retried for minutes.
PARENT = f"projects/p/locations/{ZONE}"
SCRIPT = "#!/bin/bash\n" + "# a startup script as long as podmanager's\n" * 220  # about 9.5 kB a node


@dataclass
class PagingRig:
    sim: SimCloud
    emulator: TpuEmulator
    address: str


@pytest.fixture
def paging_rig() -> Iterator[PagingRig]:
    sim = SimCloud("p", clock=FakeClock(), create_latency_s=0.0)
    emulator = TpuEmulator(sim)
    server, port = emulator.serve()
    try:
        yield PagingRig(sim, emulator, f"127.0.0.1:{port}")
    finally:
        server.stop(grace=None).wait()


def make_nodes(sim: SimCloud, count: int, *, queued: bool = False) -> list[str]:
    names = [f"big-s{i:04d}" for i in range(count)]
    for name in names:
        request = NodeRequest("v4-8", "rt", Capacity.ON_DEMAND, labels={CLUSTER_LABEL: "big"},
                              metadata={"startup-script": SCRIPT})
        if queued:
            sim.create_queued_resource(ZONE, f"{name}-qr", name, request)
        else:
            sim.create_node(ZONE, name, request)
    return names


def raw_client(paging_rig: PagingRig, **options: int) -> TpuClient:
    channel = grpc.insecure_channel(paging_rig.address, options=list(options.items()))
    return TpuClient(transport=TpuGrpcTransport(channel=channel))


def test_the_emulator_answers_one_page_at_a_time_in_name_order(paging_rig: PagingRig) -> None:
    names = make_nodes(paging_rig.sim, 5)
    client = raw_client(paging_rig)
    try:
        first = client.list_nodes(request=cloud_tpu.ListNodesRequest(parent=PARENT, page_size=2)).pages
        page = next(iter(first))
        assert [n.name.rsplit("/", 1)[1] for n in page.nodes] == names[:2] and page.next_page_token
        paging_rig.sim.delete_node(ZONE, names[0])  # gone between pages: the next page still starts after names[1]
        rest = client.list_nodes(request=cloud_tpu.ListNodesRequest(parent=PARENT, page_size=2,
                                                                   page_token=page.next_page_token))
        assert [n.name.rsplit("/", 1)[1] for n in rest] == names[2:]
        with pytest.raises(google_exceptions.InvalidArgument, match="page_size"):
            client.list_nodes(request=cloud_tpu.ListNodesRequest(parent=PARENT, page_size=-1))
    finally:
        client.transport.close()


def test_an_unpaged_list_gets_at_most_the_largest_page(paging_rig: PagingRig) -> None:
    make_nodes(paging_rig.sim, MAX_PAGE_SIZE + 5)
    client = raw_client(paging_rig)
    try:
        page = next(iter(client.list_nodes(request=cloud_tpu.ListNodesRequest(parent=PARENT)).pages))
        assert len(page.nodes) == MAX_PAGE_SIZE and page.next_page_token
    finally:
        client.transport.close()


def test_gcp_cloud_follows_every_page_of_nodes_and_queued_resources(paging_rig: PagingRig) -> None:
    names = make_nodes(paging_rig.sim, 7, queued=True)
    with GcpCloud("p", emulator_host=paging_rig.address, clock=FakeClock(), list_page_size=3) as cloud:
        assert sorted(q.name for q in cloud.list_queued_resources(ZONE)) == [f"{n}-qr" for n in names]
        asked = paging_rig.emulator.requests_of("ListQueuedResources")
        assert [r.page_size for r in asked] == [3, 3, 3] and [bool(r.page_token) for r in asked] == [False, True, True]


def test_a_zone_of_1100_slices_is_listed_whole(paging_rig: PagingRig) -> None:
    """The trial's `down` of 1,100 slices: the unpaged reply was 10.9 MB and never arrived."""
    names = make_nodes(paging_rig.sim, 1100)
    with GcpCloud("p", emulator_host=paging_rig.address, clock=FakeClock(), retry_deadline_s=0) as cloud:
        assert sorted(n.name for n in cloud.list_nodes(ZONE)) == names
    assert len(paging_rig.emulator.requests_of("ListNodes")) == 11


def test_a_reply_too_large_for_the_client_says_so_and_is_not_retried(paging_rig: PagingRig) -> None:
    make_nodes(paging_rig.sim, 3)
    client = raw_client(paging_rig, **{"grpc.max_receive_message_length": 4096})  # one node is more
    try:
        with pytest.raises(google_exceptions.ResourceExhausted) as raised:
            client.list_nodes(request=cloud_tpu.ListNodesRequest(parent=PARENT))
    finally:
        client.transport.close()
    mapped = map_call_error(raised.value)
    assert not isinstance(mapped, errors.TransientError)
    assert "reply was too large" in str(mapped) and "rate limited" not in str(mapped)


def test_a_service_that_stays_unavailable_is_named_once() -> None:
    def unavailable(**_: object) -> None:
        raise google_exceptions.ServiceUnavailable("down")

    with pytest.raises(errors.TransientError) as raised:
        call_google("list nodes", unavailable, {}, service="the Cloud TPU API", clock=FakeClock(), call_timeout_s=1,
                    retry_deadline_s=2, retry_initial_s=1, retry_max_s=1, map_error=map_call_error)
    assert raised.value.hint.startswith("The Cloud TPU API is unavailable")
