"""UpdateNode (metadata) and GetGuestAttributes, through `GcpCloud` and the real `TpuClient`
against the emulator; one FakeClock drives the simulator and the client's polls."""

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
from podmanager.cloud.gcp.client import GcpCloud
from podmanager.cloud.retry import RetryingCloud
from podmanager.core.clock import FakeClock
from podmanager.core.spec import Capacity
from podmanager.emulator.sim.cloud import SimCloud
from podmanager.emulator.sim.records import SimState
from podmanager.emulator.tpu_api import TpuEmulator

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
