"""GcpCloud — the real google-cloud-tpu client — against the simulator served over gRPC.

Every test drives `GcpCloud` through a `TpuEmulator` listening on 127.0.0.1; one
FakeClock drives the simulator and the client's polls and backoff, so nothing waits. Last,
`check_credentials`, without the emulator.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from podmanager.cloud import errors
from podmanager.cloud.base import (
    CLUSTER_LABEL,
    SLICE_LABEL,
    NodeNetwork,
    NodeRequest,
    NodeState,
    QueuedResourceState,
)
from podmanager.cloud.errors import AuthenticationError
from podmanager.cloud.gcp import client as gcp
from podmanager.cloud.gcp.client import GcpCloud, check_credentials
from podmanager.core.clock import FakeClock, RealClock
from podmanager.core.errors import TimeoutExceededError
from podmanager.core.spec import Capacity
from podmanager.emulator.sim.cloud import SimCloud
from podmanager.emulator.tpu_api import TpuEmulator

ZONE = "us-central2-b"
LABELS = {CLUSTER_LABEL: "demo", SLICE_LABEL: "0"}


@dataclass
class Rig:
    clock: FakeClock
    sim: SimCloud
    emulator: TpuEmulator
    cloud: GcpCloud
    address: str


@pytest.fixture
def rig() -> Iterator[Rig]:
    clock = FakeClock()
    sim = SimCloud("podmanager-sim", clock=clock, create_latency_s=12.0, delete_latency_s=3.0)
    emulator = TpuEmulator(sim)
    server, port = emulator.serve("127.0.0.1", 0)
    address = f"127.0.0.1:{port}"
    cloud = GcpCloud(
        "my-project", emulator_host=address, clock=clock, poll_interval_s=5.0, retry_initial_s=1.0, retry_deadline_s=60.0,
        call_timeout_s=10.0,
    )
    try:
        yield Rig(clock, sim, emulator, cloud, address)
    finally:
        cloud.close()
        server.stop(grace=None).wait()


def request(capacity: Capacity = Capacity.ON_DEMAND, accelerator: str = "v4-16", **extra: object) -> NodeRequest:
    return NodeRequest(
        accelerator_type=accelerator,
        runtime_version="tpu-ubuntu2204-base",
        capacity=capacity,
        labels=dict(LABELS),
        metadata={"startup-script": "#!/bin/bash\necho hi", "podmanager-token-secret": "demo-ray-token"},
        **extra,  # type: ignore[arg-type]
    )


# ---------------------------------------------------------------------- nodes


def test_node_lifecycle_create_get_list_delete(rig: Rig) -> None:
    operation = rig.cloud.create_node(ZONE, "demo-s0", request())
    assert not operation.done and operation.error is None
    assert operation.name.startswith("projects/podmanager-sim/locations/us-central2-b/operations/")

    creating = rig.cloud.get_node(ZONE, "demo-s0")
    assert creating.state is NodeState.CREATING
    assert (creating.name, creating.zone, creating.accelerator_type) == ("demo-s0", ZONE, "v4-16")
    assert creating.labels == LABELS and creating.cluster == "demo" and creating.slice_index == 0
    assert creating.metadata["startup-script"].startswith("#!/bin/bash")
    assert creating.capacity is Capacity.ON_DEMAND
    assert creating.runtime_version == "tpu-ubuntu2204-base"
    assert creating.create_time == pytest.approx(rig.clock.now())

    finished = rig.cloud.wait(operation, timeout_s=600)
    assert finished.done and finished.error is None and finished.name == operation.name

    ready = rig.cloud.get_node(ZONE, "demo-s0")
    assert ready.state is NodeState.READY and ready.health == "HEALTHY"
    assert ready.endpoints == ("127.0.0.1", "127.0.0.1")  # v4-16: two hosts, endpoint i = worker i
    assert [n.name for n in rig.cloud.list_nodes(ZONE)] == ["demo-s0"]
    assert rig.cloud.list_nodes("europe-west4-a") == []

    deleting = rig.cloud.delete_node(ZONE, "demo-s0")
    assert rig.cloud.get_node(ZONE, "demo-s0").state is NodeState.DELETING
    assert rig.cloud.wait(deleting, timeout_s=60).error is None
    with pytest.raises(errors.NotFoundError):
        rig.cloud.get_node(ZONE, "demo-s0")
    assert rig.sim.all_nodes() == []


def test_long_running_operation_finishes_only_after_several_polls(rig: Rig) -> None:
    start = rig.clock.now()
    operation = rig.cloud.create_node(ZONE, "demo-s0", request())
    assert not rig.cloud.get_operation(operation.name).done  # the name round-trips

    finished = rig.cloud.wait(operation.name, timeout_s=600)

    assert finished.done and finished.error is None
    polls = rig.emulator.requests_of("GetOperation")
    assert len(polls) >= 3 and all(p.name == operation.name for p in polls)
    assert rig.clock.now() - start >= 12.0  # the create latency, spent in 5 s polls
    assert rig.sim.get_node(ZONE, "demo-s0").state is NodeState.READY


def test_wait_gives_up_at_its_timeout(rig: Rig) -> None:
    operation = rig.cloud.create_node(ZONE, "demo-s0", request())
    with pytest.raises(TimeoutExceededError, match="still running after 6s"):
        rig.cloud.wait(operation, timeout_s=6)


def test_unknown_operation_is_not_found(rig: Rig) -> None:
    with pytest.raises(errors.NotFoundError):
        rig.cloud.get_operation("projects/podmanager-sim/locations/us-central2-b/operations/op-999")


def test_delete_of_a_missing_node_is_not_found(rig: Rig) -> None:
    with pytest.raises(errors.NotFoundError, match="ghost"):
        rig.cloud.delete_node(ZONE, "ghost")


def test_second_create_of_the_same_node_already_exists(rig: Rig) -> None:
    rig.cloud.create_node(ZONE, "demo-s0", request())
    with pytest.raises(errors.AlreadyExistsError):
        rig.cloud.create_node(ZONE, "demo-s0", request())


def test_unknown_accelerator_is_an_invalid_request(rig: Rig) -> None:
    with pytest.raises(errors.InvalidRequestError, match="v9-99"):
        rig.cloud.create_node(ZONE, "demo-s0", request(accelerator="v9-99"))


@pytest.mark.parametrize(
    ("capacity", "spot", "reserved"),
    [(Capacity.ON_DEMAND, False, False), (Capacity.SPOT, True, False), (Capacity.RESERVED, False, True)],
)
def test_capacity_is_sent_as_scheduling_config(rig: Rig, capacity: Capacity, spot: bool, reserved: bool) -> None:
    rig.cloud.create_node(ZONE, "demo-s0", request(capacity))

    (sent,) = rig.emulator.requests_of("CreateNode")
    assert sent.parent == "projects/my-project/locations/us-central2-b" and sent.node_id == "demo-s0"
    assert (sent.node.scheduling_config.spot, sent.node.scheduling_config.reserved) == (spot, reserved)
    assert dict(sent.node.labels) == LABELS
    assert rig.sim.get_node(ZONE, "demo-s0").capacity is capacity
    assert rig.cloud.get_node(ZONE, "demo-s0").capacity is capacity


NETWORK = NodeNetwork(
    network="projects/host-project/global/networks/tpu-vpc",
    subnetwork="projects/host-project/regions/us-central2/subnetworks/tpu-subnet",
    enable_external_ips=True,
    service_account="tpu-vms@my-project.iam.gserviceaccount.com",
    scopes=("https://www.googleapis.com/auth/cloud-platform",),
    tags=("ray-head-peer", "allow-ssh"),
)


def test_network_settings_are_sent_as_network_config_service_account_and_tags(rig: Rig) -> None:
    rig.cloud.create_node(ZONE, "demo-s0", request(network=NETWORK))

    (sent,) = rig.emulator.requests_of("CreateNode")
    config, account = sent.node.network_config, sent.node.service_account
    assert (config.network, config.subnetwork, config.enable_external_ips) == (
        "projects/host-project/global/networks/tpu-vpc",
        "projects/host-project/regions/us-central2/subnetworks/tpu-subnet", True)
    assert account.email == "tpu-vms@my-project.iam.gserviceaccount.com"
    assert list(account.scope) == ["https://www.googleapis.com/auth/cloud-platform"]
    assert list(sent.node.tags) == ["ray-head-peer", "allow-ssh"]
    assert rig.cloud.get_node(ZONE, "demo-s0").network == NETWORK  # and the API reports them back


def test_without_network_settings_nothing_is_sent_and_the_api_defaults_apply(rig: Rig) -> None:
    rig.cloud.create_node(ZONE, "demo-s0", request())

    (sent,) = rig.emulator.requests_of("CreateNode")
    assert "network_config" not in sent.node and "service_account" not in sent.node and not sent.node.tags
    assert rig.cloud.get_node(ZONE, "demo-s0").network is None


def test_empty_network_fields_leave_the_api_defaults(rig: Rig) -> None:
    """Only internal IPs asked for: the network and the account stay the API's (empty), scopes as given."""
    rig.cloud.create_node(ZONE, "demo-s0", request(network=NodeNetwork(scopes=("https://scope.test/a",))))

    (sent,) = rig.emulator.requests_of("CreateNode")
    assert "network_config" in sent.node and not sent.node.network_config.enable_external_ips
    assert (sent.node.network_config.network, sent.node.service_account.email) == ("", "")
    assert list(sent.node.service_account.scope) == ["https://scope.test/a"]


def test_a_queued_resource_carries_the_network_settings_in_its_node_spec(rig: Rig) -> None:
    rig.cloud.create_queued_resource(ZONE, "demo-qr0", "demo-s0", request(Capacity.SPOT, network=NETWORK))

    (sent,) = rig.emulator.requests_of("CreateQueuedResource")
    node = sent.queued_resource.tpu.node_spec[0].node
    assert node.network_config.subnetwork == NETWORK.subnetwork and node.network_config.enable_external_ips
    assert node.service_account.email == NETWORK.service_account and list(node.tags) == list(NETWORK.tags)
    assert rig.cloud.get_node(ZONE, "demo-s0").network == NETWORK


@pytest.mark.parametrize(
    ("capacity", "event", "state"),
    [(Capacity.SPOT, "preempt", NodeState.PREEMPTED), (Capacity.ON_DEMAND, "terminate", NodeState.TERMINATED)],
)
def test_lost_nodes_report_their_state(rig: Rig, capacity: Capacity, event: str, state: NodeState) -> None:
    rig.cloud.wait(rig.cloud.create_node(ZONE, "demo-s0", request(capacity)), timeout_s=600)
    getattr(rig.sim, event)(ZONE, "demo-s0")
    lost = rig.cloud.get_node(ZONE, "demo-s0")
    assert lost.state is state and lost.health is None


def test_repairing_node(rig: Rig) -> None:
    rig.cloud.wait(rig.cloud.create_node(ZONE, "demo-s0", request()), timeout_s=600)
    rig.sim.repair(ZONE, "demo-s0", duration_s=30)
    assert rig.cloud.get_node(ZONE, "demo-s0").state is NodeState.REPAIRING
    rig.clock.advance(31)
    assert rig.cloud.get_node(ZONE, "demo-s0").state is NodeState.READY


# ---------------------------------------------------------------------- operation errors


@pytest.mark.parametrize(
    ("kind", "capacity", "error_type", "code"),
    [
        ("capacity", Capacity.ON_DEMAND, errors.CapacityError, 8),
        ("reservation", Capacity.RESERVED, errors.ReservationShortfallError, 9),
        ("preempt-while-creating", Capacity.SPOT, errors.PreemptedWhileCreatingError, 3),
        ("invalid-request", Capacity.ON_DEMAND, errors.InvalidRequestError, 3),
    ],
)
def test_failed_creation_operations_map_to_their_error(
    rig: Rig, kind: str, capacity: Capacity, error_type: type[errors.CloudError], code: int
) -> None:
    rig.sim.inject_create_fault(ZONE, kind)
    operation = rig.cloud.create_node(ZONE, "demo-s0", request(capacity))

    finished = rig.cloud.wait(operation, timeout_s=600)

    assert finished.done
    assert type(finished.error) is error_type
    assert f"operation error code {code}" in str(finished.error)
    # The next create in the zone (fault used up) succeeds.
    if kind != "preempt-while-creating":
        assert rig.sim.all_nodes() == []
    else:
        assert rig.cloud.get_node(ZONE, "demo-s0").state is NodeState.PREEMPTED
        rig.cloud.wait(rig.cloud.delete_node(ZONE, "demo-s0"), timeout_s=60)
    assert rig.cloud.wait(rig.cloud.create_node(ZONE, "demo-s0", request(capacity)), timeout_s=600).error is None


def test_capacity_fault_is_per_zone(rig: Rig) -> None:
    rig.sim.inject_create_fault(ZONE, "capacity", times=-1)
    failed = rig.cloud.wait(rig.cloud.create_node(ZONE, "demo-s0", request()), timeout_s=60)
    other = rig.cloud.wait(rig.cloud.create_node("us-central2-a", "demo-s0", request()), timeout_s=600)
    assert isinstance(failed.error, errors.CapacityError) and "no more capacity" in failed.error.message
    assert other.error is None


# ---------------------------------------------------------------------- call errors


def test_quota_error_names_the_quota(rig: Rig) -> None:
    rig.sim.inject_quota("TPUV4PodPerProjectPerZoneForTPUAPI")
    with pytest.raises(errors.QuotaError) as raised:
        rig.cloud.create_node(ZONE, "demo-s0", request())
    assert raised.value.quota == "TPUV4PodPerProjectPerZoneForTPUAPI"
    assert "TPUV4PodPerProjectPerZoneForTPUAPI" in str(raised.value)
    assert len(rig.emulator.requests_of("CreateNode")) == 1  # a quota error is not retried
    assert rig.sim.all_nodes() == []


def test_transient_errors_are_retried_until_the_call_succeeds(rig: Rig) -> None:
    rig.cloud.wait(rig.cloud.create_node(ZONE, "demo-s0", request()), timeout_s=600)
    retries: list[tuple[str, str, int]] = []
    rig.cloud.on_retry = lambda what, error, attempt: retries.append((what, type(error).__name__, attempt))
    rig.sim.inject_transient(3)
    before_calls = len(rig.emulator.requests_of("ListNodes"))
    before = rig.clock.now()

    nodes = rig.cloud.list_nodes(ZONE)

    assert [n.name for n in nodes] == ["demo-s0"]
    assert len(rig.emulator.requests_of("ListNodes")) - before_calls == 4
    assert [r[2] for r in retries] == [1, 2, 3] and {r[1] for r in retries} == {"TransientError"}
    assert rig.clock.now() > before  # it backed off between attempts (on the fake clock)


def test_transient_errors_for_ever_give_up_at_the_deadline(rig: Rig) -> None:
    rig.cloud.retry_deadline_s = 30.0
    rig.sim.inject_transient(1_000_000)
    before = rig.clock.now()

    with pytest.raises(errors.TransientError, match="gave up at the 30s retry deadline") as raised:
        rig.cloud.get_node(ZONE, "demo-s0")

    assert "get node demo-s0 in us-central2-b failed" in str(raised.value)
    assert "UNAVAILABLE" in str(raised.value)
    assert rig.clock.now() - before <= 30.0
    assert len(rig.emulator.requests_of("GetNode")) > 3


def test_transient_errors_for_ever_with_real_time_give_up_quickly(rig: Rig) -> None:
    cloud = GcpCloud("my-project", emulator_host=rig.address, clock=RealClock(), retry_initial_s=0.02,
                     retry_max_s=0.1, retry_deadline_s=0.5, call_timeout_s=5)
    rig.sim.inject_transient(1_000_000)
    started = time.monotonic()
    try:
        with pytest.raises(errors.TransientError, match="retry deadline"):
            cloud.list_nodes(ZONE)
    finally:
        cloud.close()
    assert time.monotonic() - started < 3.0


def test_every_call_has_a_timeout(rig: Rig) -> None:
    """A server that never answers: the call times out (DEADLINE_EXCEEDED) and is retried, then gives up."""
    import threading
    from concurrent import futures

    import grpc

    release = threading.Event()

    def hang(request: bytes, context: grpc.ServicerContext) -> bytes:
        release.wait(5)
        return b""

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("google.cloud.tpu.v2.Tpu", {"GetNode": grpc.unary_unary_rpc_method_handler(hang)}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    cloud = GcpCloud("p", emulator_host=f"127.0.0.1:{port}", clock=RealClock(), call_timeout_s=0.2,
                     retry_initial_s=0.01, retry_max_s=0.02, retry_deadline_s=0.5)
    try:
        with pytest.raises(errors.TransientError, match="DEADLINE_EXCEEDED|Deadline"):
            cloud.get_node(ZONE, "x")
    finally:
        release.set()
        cloud.close()
        server.stop(grace=None).wait()


# ---------------------------------------------------------------------- queued resources


def test_spot_queued_resource_lifecycle(rig: Rig) -> None:
    operation = rig.cloud.create_queued_resource(ZONE, "demo-qr0", "demo-s0", request(Capacity.SPOT))

    (sent,) = rig.emulator.requests_of("CreateQueuedResource")
    assert sent.queued_resource_id == "demo-qr0"
    assert "spot" in sent.queued_resource and "guaranteed" not in sent.queued_resource
    (spec,) = sent.queued_resource.tpu.node_spec
    assert (spec.parent, spec.node_id) == ("projects/my-project/locations/us-central2-b", "demo-s0")
    assert spec.node.scheduling_config.spot and dict(spec.node.labels) == LABELS
    assert rig.sim.get_node(ZONE, "demo-s0").capacity is Capacity.SPOT

    (queued,) = rig.cloud.list_queued_resources(ZONE)
    assert (queued.name, queued.zone, queued.node_name) == ("demo-qr0", ZONE, "demo-s0")
    assert queued.state is QueuedResourceState.PROVISIONING and queued.cluster == "demo"

    assert rig.cloud.wait(operation, timeout_s=600).error is None
    assert rig.cloud.get_queued_resource(ZONE, "demo-qr0").state is QueuedResourceState.ACTIVE
    assert rig.cloud.get_node(ZONE, "demo-s0").state is NodeState.READY

    deleting = rig.cloud.delete_queued_resource(ZONE, "demo-qr0")
    (sent_delete,) = rig.emulator.requests_of("DeleteQueuedResource")
    assert sent_delete.force  # the node goes with it
    assert rig.cloud.get_node(ZONE, "demo-s0").state is NodeState.DELETING
    assert rig.cloud.wait(deleting, timeout_s=60).error is None
    rig.clock.advance(5)
    assert rig.cloud.list_queued_resources(ZONE) == [] and rig.cloud.list_nodes(ZONE) == []


def test_reserved_queued_resource_sends_guaranteed_tier_and_reservation(rig: Rig) -> None:
    rig.cloud.create_queued_resource(ZONE, "demo-qr0", "demo-s0", request(Capacity.RESERVED, reservation="my-res"))

    (sent,) = rig.emulator.requests_of("CreateQueuedResource")
    assert "guaranteed" in sent.queued_resource and "spot" not in sent.queued_resource
    assert sent.queued_resource.reservation_name == "projects/my-project/locations/us-central2-b/reservations/my-res"
    assert sent.queued_resource.tpu.node_spec[0].node.scheduling_config.reserved
    assert rig.sim.get_node(ZONE, "demo-s0").capacity is Capacity.RESERVED


def test_on_demand_queued_resource_sets_no_tier(rig: Rig) -> None:
    rig.cloud.create_queued_resource(ZONE, "demo-qr0", "demo-s0", request())
    (sent,) = rig.emulator.requests_of("CreateQueuedResource")
    assert "spot" not in sent.queued_resource and "guaranteed" not in sent.queued_resource
    assert rig.sim.get_node(ZONE, "demo-s0").capacity is Capacity.ON_DEMAND


def test_a_queued_resource_without_capacity_waits_until_capacity_comes(rig: Rig) -> None:
    rig.sim.inject_create_fault(ZONE, "capacity", times=-1)
    operation = rig.cloud.create_queued_resource(ZONE, "demo-qr0", "demo-s0", request())
    assert rig.cloud.wait(operation, timeout_s=60).error is None  # accepted: it waits, it does not fail
    rig.clock.advance(600)
    assert [q.state for q in rig.cloud.list_queued_resources(ZONE)] == [QueuedResourceState.WAITING_FOR_RESOURCES]
    assert rig.cloud.list_nodes(ZONE) == []
    rig.sim.clear_faults()  # capacity comes
    assert [q.state for q in rig.cloud.list_queued_resources(ZONE)] == [QueuedResourceState.PROVISIONING]
    rig.clock.advance(rig.sim.create_latency_s + 0.1)
    assert [q.state for q in rig.cloud.list_queued_resources(ZONE)] == [QueuedResourceState.ACTIVE]


def test_a_waiting_queued_resource_fails_at_its_valid_until(rig: Rig) -> None:
    rig.sim.inject_create_fault(ZONE, "capacity", times=-1)
    rig.cloud.create_queued_resource(ZONE, "demo-qr0", "demo-s0", request(valid_for_s=100.0))
    rig.clock.advance(101)
    assert [q.state for q in rig.cloud.list_queued_resources(ZONE)] == [QueuedResourceState.FAILED]
    rig.sim.clear_faults()
    assert rig.cloud.list_nodes(ZONE) == []  # a failed request is not filled later


def test_delete_of_a_missing_queued_resource_is_not_found(rig: Rig) -> None:
    with pytest.raises(errors.NotFoundError):
        rig.cloud.delete_queued_resource(ZONE, "ghost")
    with pytest.raises(errors.NotFoundError):
        rig.cloud.get_queued_resource(ZONE, "ghost")


def test_queued_resource_requests_carry_a_request_id_that_makes_retries_idempotent(rig: Rig) -> None:
    from google.cloud.tpu_v2.types import cloud_tpu

    rig.cloud.create_queued_resource(ZONE, "demo-qr0", "demo-s0", request())
    (sent,) = rig.emulator.requests_of("CreateQueuedResource")
    assert sent.request_id
    # The same request again (what a retry after a lost reply sends) gets the same operation back.
    replay = rig.cloud._client.create_queued_resource(request=sent, retry=None, timeout=10)
    first = rig.sim.list_queued_resources(ZONE)
    assert len(first) == 1 and replay.operation.name.endswith("op-1")
    deleted = rig.cloud.delete_queued_resource(ZONE, "demo-qr0")
    (sent_delete,) = rig.emulator.requests_of("DeleteQueuedResource")
    again = rig.cloud._client.delete_queued_resource(request=cloud_tpu.DeleteQueuedResourceRequest(sent_delete), retry=None, timeout=10)
    assert again.operation.name == deleted.name


def test_gcp_cloud_satisfies_the_protocol(rig: Rig) -> None:
    from podmanager.cloud.base import TpuCloud

    assert isinstance(rig.cloud, TpuCloud) and rig.cloud.backend == "gcp" and rig.cloud.project == "my-project"


def test_transient_errors_on_create_are_retried_without_creating_twice(rig: Rig) -> None:
    rig.sim.inject_transient(2)
    operation = rig.cloud.create_node(ZONE, "demo-s0", request())
    assert len(rig.emulator.requests_of("CreateNode")) == 3
    assert rig.cloud.wait(operation, timeout_s=600).error is None
    assert [n.name for n in rig.sim.all_nodes()] == ["demo-s0"]


def test_finished_queued_resource_operation_carries_the_queued_resource(rig: Rig) -> None:
    from google.cloud.tpu_v2.types import cloud_tpu
    from google.longrunning import operations_pb2

    operation = rig.cloud.create_queued_resource(ZONE, "demo-qr0", "demo-s0", request(Capacity.SPOT))
    rig.cloud.wait(operation, timeout_s=600)
    raw = rig.cloud._client.get_operation(request=operations_pb2.GetOperationRequest(name=operation.name), timeout=10)
    queued = cloud_tpu.QueuedResource.deserialize(raw.response.value)
    assert queued.name == "projects/my-project/locations/us-central2-b/queuedResources/demo-qr0"
    assert "spot" in queued and queued.tpu.node_spec[0].node_id == "demo-s0"
    # The stored request was not changed by answering.
    assert rig.cloud.get_queued_resource(ZONE, "demo-qr0").state.value == "ACTIVE"


def test_a_node_message_is_read_field_by_field_into_the_record() -> None:
    """Every field the API reports reaches the record (read from the raw message), and an empty
    message gives the record's empty values, not a default's."""
    from datetime import datetime, timezone

    from google.cloud.tpu_v2.types import cloud_tpu

    from podmanager.cloud.base import NodeNetwork
    from podmanager.cloud.gcp.client import node_record

    full = cloud_tpu.Node(
        name="projects/p/locations/us-central2-b/nodes/n-1", accelerator_type="v4-16",
        state=cloud_tpu.Node.State.REIMAGING, labels={"a": "1"}, runtime_version="tpu-ubuntu2204-base",
        health=cloud_tpu.Node.Health.UNHEALTHY_MAINTENANCE, metadata={"k": "v"},
        scheduling_config=cloud_tpu.SchedulingConfig(spot=True),
        network_endpoints=[cloud_tpu.NetworkEndpoint(ip_address="10.0.0.2"),
                           cloud_tpu.NetworkEndpoint(ip_address="10.0.0.3")],
        create_time=datetime(2026, 1, 2, 3, 4, 5, 500000, tzinfo=timezone.utc),
        network_config=cloud_tpu.NetworkConfig(network="projects/p/global/networks/net", enable_external_ips=True),
        service_account=cloud_tpu.ServiceAccount(email="sa@p.iam.gserviceaccount.com", scope=["s1"]),
        tags=["t"])
    node = node_record(full)
    assert (node.name, node.zone, node.accelerator_type) == ("n-1", "us-central2-b", "v4-16")
    assert node.state is NodeState.RESTARTING and node.capacity is Capacity.SPOT
    assert (node.labels, node.metadata, node.runtime_version) == ({"a": "1"}, {"k": "v"}, "tpu-ubuntu2204-base")
    assert node.health == "UNHEALTHY_MAINTENANCE" and node.endpoints == ("10.0.0.2", "10.0.0.3")
    assert node.create_time == datetime(2026, 1, 2, 3, 4, 5, 500000, tzinfo=timezone.utc).timestamp()
    assert node.network == NodeNetwork(network="projects/p/global/networks/net", subnetwork="",
                                       enable_external_ips=True, service_account="sa@p.iam.gserviceaccount.com",
                                       scopes=("s1",), tags=("t",))
    empty = node_record(cloud_tpu.Node(name="projects/p/locations/z/nodes/m"))
    assert (empty.health, empty.create_time, empty.network, empty.endpoints) == (None, None, None, ())
    assert empty.state is NodeState.UNSPECIFIED and empty.capacity is Capacity.ON_DEMAND


# check_credentials: fail at once, with the command that fixes it, when there are no credentials.
@pytest.fixture
def no_adc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An environment with no Application Default Credentials and not on Google Cloud."""
    for name in ("GOOGLE_APPLICATION_CREDENTIALS", "CLOUDSDK_CONFIG", "GCE_METADATA_HOST", "GCE_METADATA_IP", "TPU_EMULATOR_HOST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(gcp, "_on_gce", lambda: False)  # hermetic even when CI runs on a GCE VM
    return tmp_path


def assert_says_how_to_authenticate(error: AuthenticationError) -> None:
    text = str(error)
    assert "gcloud auth application-default login" in text
    assert "--dry-run" in text and "TPU_EMULATOR_HOST" in text


def test_missing_credentials_file_fails_at_once(no_adc: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(no_adc / "nope.json"))
    started = time.monotonic()
    with pytest.raises(AuthenticationError) as raised:
        check_credentials("my-project")
    assert time.monotonic() - started < 1.0
    assert "nope.json" in str(raised.value)
    assert_says_how_to_authenticate(raised.value)


def test_no_adc_at_all_fails_at_once(no_adc: Path) -> None:
    started = time.monotonic()
    with pytest.raises(AuthenticationError) as raised:
        check_credentials("my-project")
    assert time.monotonic() - started < 1.0
    assert "my-project" in str(raised.value)
    assert_says_how_to_authenticate(raised.value)


def test_gcp_cloud_without_emulator_or_credentials_fails_at_once(no_adc: Path) -> None:
    started = time.monotonic()
    with pytest.raises(AuthenticationError):
        GcpCloud("my-project")
    assert time.monotonic() - started < 1.0


def test_unusable_credentials_file_says_so(no_adc: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = no_adc / "key.json"
    broken.write_text("{not json")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(broken))
    with pytest.raises(AuthenticationError, match="unusable") as raised:
        check_credentials("my-project")
    assert_says_how_to_authenticate(raised.value)


def test_gcloud_user_credentials_are_used_without_network(no_adc: Path) -> None:
    adc = no_adc / ".config" / "gcloud" / "application_default_credentials.json"
    adc.parent.mkdir(parents=True)
    adc.write_text(json.dumps({"type": "authorized_user", "client_id": "id", "client_secret": "s", "refresh_token": "r"}))
    credentials = check_credentials("my-project")
    assert credentials is not None
    GcpCloud("my-project", credentials=credentials).close()  # constructing makes no call


def test_emulator_host_from_environment_needs_no_credentials(no_adc: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TPU_EMULATOR_HOST", "127.0.0.1:1")
    cloud = GcpCloud("my-project")
    assert cloud.emulator_host == "127.0.0.1:1"
    cloud.close()
