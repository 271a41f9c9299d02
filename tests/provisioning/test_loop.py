"""The provisioning loop on the real client: Provisioner -> GcpCloud -> gRPC -> emulator -> SimCloud.

The same failover and teardown paths that test_provision.py runs on the bare simulator,
here through google-cloud-tpu, so a mapping mistake in gcp.py shows up as a wrong action.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from podmanager.cloud import errors
from podmanager.cloud.base import NodeState, QueuedResourceState
from podmanager.cloud.gcp.client import GcpCloud
from podmanager.core.clock import FakeClock
from podmanager.core.errors import TimeoutExceededError
from podmanager.core.spec import Capacity, parse_spec
from podmanager.emulator.sim.cloud import SimCloud
from podmanager.emulator.tpu_api import TpuEmulator
from podmanager.provisioning.loop import Provisioner
from podmanager.provisioning.plan import desired_slices

ZONES = ["zone-a", "zone-b"]


@pytest.fixture
def setup() -> Iterator[tuple[FakeClock, SimCloud, TpuEmulator, GcpCloud]]:
    clock = FakeClock()
    sim = SimCloud("my-project", clock=clock, create_latency_s=4.0, delete_latency_s=1.0)
    emulator = TpuEmulator(sim)
    server, port = emulator.serve()
    cloud = GcpCloud("my-project", emulator_host=f"127.0.0.1:{port}", clock=clock, poll_interval_s=1.0)
    try:
        yield clock, sim, emulator, cloud
    finally:
        cloud.close()
        server.stop(grace=None).wait()


def spec(**slice_fields: object):  # type: ignore[no-untyped-def]
    return parse_spec({"name": "c", "project": "my-project", "zones": ZONES,
                       "slices": [{"accelerator": "v4-16", "count": 2, **slice_fields}]})


def test_capacity_failover_and_teardown_through_the_real_client(setup) -> None:  # type: ignore[no-untyped-def]
    clock, sim, emulator, cloud = setup
    sim.inject_create_fault("zone-a", "capacity", times=-1)
    events: list[str] = []
    provisioner = Provisioner(cloud, "c", ZONES, clock=clock, poll_interval_s=1.0,
                              record=lambda kind, *args, **kw: events.append(kind))

    nodes = provisioner.converge(desired_slices(spec(capacity="spot")), timeout_s=300)

    assert sorted((n.name, n.zone, n.state, n.capacity) for n in nodes) == [
        ("c-s0", "zone-b", NodeState.READY, Capacity.SPOT), ("c-s1", "zone-b", NodeState.READY, Capacity.SPOT)]
    assert events.count("zone_fallback") == 2 and events.count("slice_ready") == 2
    assert all(r.node.scheduling_config.spot for r in emulator.requests_of("CreateNode"))

    provisioner.converge([], timeout_s=300)
    assert sim.all_nodes() == []


def test_queued_slices_through_the_real_client(setup) -> None:  # type: ignore[no-untyped-def]
    clock, sim, emulator, cloud = setup
    provisioner = Provisioner(cloud, "c", ZONES, clock=clock, poll_interval_s=1.0)

    nodes = provisioner.converge(desired_slices(spec(queued=True, capacity="reserved")), timeout_s=300)

    assert sorted((n.name, n.zone, n.capacity) for n in nodes) == [
        ("c-s0", "zone-a", Capacity.RESERVED), ("c-s1", "zone-a", Capacity.RESERVED)]
    sent = emulator.requests_of("CreateQueuedResource")
    assert len(sent) == 2 and all("guaranteed" in r.queued_resource for r in sent)
    assert sorted(q.name for q in cloud.list_queued_resources("zone-a")) == ["c-s0", "c-s1"]

    provisioner.converge([], timeout_s=300)
    clock.advance(5)
    assert sim.all_nodes() == [] and sim.all_queued_resources() == []
    assert all(r.force for r in emulator.requests_of("DeleteQueuedResource"))


def test_an_invalid_request_fails_once_with_its_message(setup) -> None:  # type: ignore[no-untyped-def]
    clock, sim, emulator, cloud = setup
    sim.inject_create_fault("zone-a", "invalid-request", times=-1)  # operation code 3, not a preemption
    provisioner = Provisioner(cloud, "c", ZONES, clock=clock, poll_interval_s=1.0)

    with pytest.raises(errors.InvalidRequestError) as refused:
        provisioner.converge(desired_slices(spec(count=1, runtime_version="tpu-nope")), timeout_s=300)

    assert len(emulator.requests_of("CreateNode")) == 1  # tried once: not re-created, not another zone
    message = str(refused.value)
    assert "slice 0 (c-s0)" in message and "zone-a" in message and "'tpu-nope' is not supported" in message
    assert "runtime_version 'tpu-nope'" in message and refused.value.exit_code == 2


def test_preempted_while_creating_is_still_created_again(setup) -> None:  # type: ignore[no-untyped-def]
    clock, sim, emulator, cloud = setup
    sim.inject_create_fault("zone-a", "preempt-while-creating", times=1)
    events: list[str] = []
    provisioner = Provisioner(cloud, "c", ZONES, clock=clock, poll_interval_s=1.0,
                              record=lambda kind, *args, **kw: events.append(kind))

    nodes = provisioner.converge(desired_slices(spec(count=1, capacity="spot")), timeout_s=300)

    assert [(n.name, n.state) for n in nodes] == [("c-s0", NodeState.READY)]
    assert events.count("slice_preempted") == 1 and len(emulator.requests_of("CreateNode")) == 2


def test_a_reservation_name_reaches_the_queued_resource_request(setup) -> None:  # type: ignore[no-untyped-def]
    clock, sim, emulator, cloud = setup
    provisioner = Provisioner(cloud, "c", ZONES, clock=clock, poll_interval_s=1.0)

    nodes = provisioner.converge(desired_slices(spec(count=1, queued=True, reservation="team-v4")), timeout_s=300)

    assert [(n.name, n.capacity) for n in nodes] == [("c-s0", Capacity.RESERVED)]
    [sent] = emulator.requests_of("CreateQueuedResource")
    assert "guaranteed" in sent.queued_resource
    assert sent.queued_resource.reservation_name == "projects/my-project/locations/zone-a/reservations/team-v4"
    assert sent.queued_resource.tpu.node_spec[0].node.scheduling_config.reserved


def test_a_suspended_spot_queued_slice_is_deleted_with_force_and_created_again(setup) -> None:  # type: ignore[no-untyped-def]
    clock, sim, emulator, cloud = setup
    provisioner = Provisioner(cloud, "c", ZONES, clock=clock, poll_interval_s=1.0)
    desired = desired_slices(spec(count=1, queued=True, capacity="spot"))
    provisioner.converge(desired, timeout_s=300)

    sim.preempt("zone-a", "c-s0")  # the service takes the spot slice back
    assert [q.state for q in cloud.list_queued_resources("zone-a")] == [QueuedResourceState.SUSPENDING]
    clock.advance(1.0)
    assert [q.state for q in cloud.list_queued_resources("zone-a")] == [QueuedResourceState.SUSPENDED]
    assert cloud.list_nodes("zone-a") == []

    nodes = provisioner.converge(desired, timeout_s=300)

    assert [(n.name, n.state) for n in nodes] == [("c-s0", NodeState.READY)]
    assert [q.state for q in cloud.list_queued_resources("zone-a")] == [QueuedResourceState.ACTIVE]
    assert [r.force for r in emulator.requests_of("DeleteQueuedResource")] == [True]
    assert len(emulator.requests_of("CreateQueuedResource")) == 2


def test_every_queued_resource_is_valid_only_for_what_remains_of_the_timeout_and_a_minute(setup) -> None:  # type: ignore[no-untyped-def]
    clock, sim, emulator, cloud = setup
    Provisioner(cloud, "c", ZONES, clock=clock, poll_interval_s=1.0).converge(
        desired_slices(spec(count=1, queued=True)), timeout_s=900)
    [sent] = emulator.requests_of("CreateQueuedResource")
    assert sent.queued_resource.queueing_policy.valid_until_duration.total_seconds() == 900 + 60  # and a margin


def test_a_timed_out_up_leaves_no_queued_resource(setup) -> None:  # type: ignore[no-untyped-def]
    clock, sim, emulator, cloud = setup
    sim.create_latency_s = 10_000.0  # granted long after `up` stops waiting
    events: list[str] = []
    provisioner = Provisioner(cloud, "c", ZONES, clock=clock, poll_interval_s=1.0,
                              record=lambda kind, *args, **kw: events.append(kind))

    with pytest.raises(TimeoutExceededError) as gave_up:
        provisioner.converge(desired_slices(spec(queued=True, capacity="spot")), timeout_s=120)

    message = str(gave_up.value)
    assert "c-s0 (CREATING)" in message
    assert "deleted the queued resource(s) it had created and not yet granted (c-s0, c-s1)" in message
    assert sim.all_queued_resources() == [] and sim.all_nodes() == []
    assert [r.force for r in emulator.requests_of("DeleteQueuedResource")] == [True, True]
    assert events.count("queued_resource_deleting") == 2


def test_a_queued_resource_past_its_valid_until_fails_and_is_created_again(setup) -> None:  # type: ignore[no-untyped-def]
    clock, sim, emulator, cloud = setup
    from podmanager.cloud.base import NodeRequest

    sim.create_latency_s = 500.0
    request = NodeRequest("v4-16", "tpu-ubuntu2204-base", labels={"podmanager-cluster": "c", "podmanager-slice": "0"},
                          valid_for_s=100.0)
    cloud.create_queued_resource("zone-a", "c-s0", "c-s0", request)
    clock.advance(99)
    assert [q.state for q in cloud.list_queued_resources("zone-a")] == [QueuedResourceState.PROVISIONING]
    clock.advance(2)
    assert [q.state for q in cloud.list_queued_resources("zone-a")] == [QueuedResourceState.FAILED]
    assert [n.state for n in cloud.list_nodes("zone-a")] == [NodeState.DELETING]  # what it began goes too

    sim.create_latency_s = 4.0
    nodes = Provisioner(cloud, "c", ZONES, clock=clock, poll_interval_s=1.0).converge(
        desired_slices(spec(count=1, queued=True)), timeout_s=300)
    assert [(n.name, n.state) for n in nodes] == [("c-s0", NodeState.READY)]


@pytest.mark.parametrize(("state", "health"), [(NodeState.HIDDEN, None), (NodeState.UNHIDING, None),
                                               (None, "TIMEOUT"), (None, "UNHEALTHY_MAINTENANCE")])
def test_a_hidden_or_unhealthy_slice_is_waited_for_then_replaced(setup, state, health) -> None:  # type: ignore[no-untyped-def]
    clock, sim, emulator, cloud = setup
    events: list[tuple[str, str]] = []
    provisioner = Provisioner(cloud, "c", ZONES, clock=clock, poll_interval_s=1.0, bounded_wait_s=60.0,
                              record=lambda kind, message, *args, **kw: events.append((kind, message)))
    desired = desired_slices(spec(count=1))
    provisioner.converge(desired, timeout_s=300)
    sim.degrade("zone-a", "c-s0", state=state, health=health)
    seen = cloud.get_node("zone-a", "c-s0")
    assert (seen.state, seen.health) == (state or NodeState.READY, health or "HEALTHY")

    started = clock.now()
    nodes = provisioner.converge(desired, timeout_s=300)

    assert [(n.name, n.state, n.health) for n in nodes] == [("c-s0", NodeState.READY, "HEALTHY")]
    assert 60 <= clock.now() - started < 80  # the bounded wait, a delete and a create; not the whole timeout
    assert any(kind == "slice_waiting" and "waiting up to 60s for it to come back, then replacing it" in message
               for kind, message in events)
    assert any(kind == "slice_deleting" and "for 60s" in message for kind, message in events)


def test_a_hidden_slice_that_comes_back_in_time_is_kept(setup) -> None:  # type: ignore[no-untyped-def]
    clock, sim, emulator, cloud = setup
    provisioner = Provisioner(cloud, "c", ZONES, clock=clock, poll_interval_s=1.0, bounded_wait_s=60.0)
    desired = desired_slices(spec(count=1))
    provisioner.converge(desired, timeout_s=300)
    sim.degrade("zone-a", "c-s0", state=NodeState.HIDING, for_s=20.0)

    provisioner.converge(desired, timeout_s=300)

    assert emulator.requests_of("DeleteNode") == [] and len(emulator.requests_of("CreateNode")) == 1


def test_unknown_after_a_failed_repair_is_replaced_at_once(setup) -> None:  # type: ignore[no-untyped-def]
    clock, sim, emulator, cloud = setup
    provisioner = Provisioner(cloud, "c", ZONES, clock=clock, poll_interval_s=1.0)
    desired = desired_slices(spec(count=1))
    provisioner.converge(desired, timeout_s=300)
    sim.degrade("zone-a", "c-s0", state=NodeState.UNKNOWN)
    assert cloud.get_node("zone-a", "c-s0").state is NodeState.UNKNOWN

    started = clock.now()
    provisioner.converge(desired, timeout_s=300)

    assert clock.now() - started < 10 and len(emulator.requests_of("DeleteNode")) == 1


def test_the_specs_network_and_runtime_default_reach_every_create(setup) -> None:  # type: ignore[no-untyped-def]
    clock, sim, emulator, cloud = setup
    network = {"network": "tpu-vpc", "subnetwork": "tpu-subnet", "enable_external_ips": True,
               "service_account": "tpu-vms@my-project.iam.gserviceaccount.com", "tags": ["ray"]}
    cluster = parse_spec({"name": "c", "project": "my-project", "zones": ZONES, "network": network,
                          "slices": [{"accelerator": "v5litepod-16"}, {"accelerator": "v6e-8", "queued": True}]})
    provisioner = Provisioner(cloud, "c", ZONES, clock=clock, poll_interval_s=1.0)

    provisioner.converge(desired_slices(cluster), timeout_s=300)

    [direct] = [r.node for r in emulator.requests_of("CreateNode")]
    [queued] = [r.queued_resource.tpu.node_spec[0].node for r in emulator.requests_of("CreateQueuedResource")]
    assert (direct.runtime_version, queued.runtime_version) == ("v2-alpha-tpuv5-lite", "v2-alpha-tpuv6e")
    for node in (direct, queued):
        assert (node.network_config.network, node.network_config.subnetwork) == ("tpu-vpc", "tpu-subnet")
        assert node.network_config.enable_external_ips
        assert node.service_account.email == "tpu-vms@my-project.iam.gserviceaccount.com"
        assert list(node.service_account.scope) == ["https://www.googleapis.com/auth/cloud-platform"]
        assert list(node.tags) == ["ray", "pm-c"]  # the spec's, then the cluster's own


def test_a_refused_create_names_the_network_it_asked_for(setup) -> None:  # type: ignore[no-untyped-def]
    clock, sim, emulator, cloud = setup
    sim.inject_create_fault("zone-a", "invalid-request", times=-1)
    cluster = parse_spec({"name": "c", "project": "my-project", "zones": ZONES, "network": {"network": "no-such-vpc"},
                          "slices": [{"accelerator": "v4-8"}]})
    provisioner = Provisioner(cloud, "c", ZONES, clock=clock, poll_interval_s=1.0)

    with pytest.raises(errors.InvalidRequestError, match="network 'no-such-vpc'"):
        provisioner.converge(desired_slices(cluster), timeout_s=300)


def test_a_queued_slice_waits_its_queue_wait_s_in_a_full_zone_then_lands_in_the_next(setup) -> None:  # type: ignore[no-untyped-def]
    clock, sim, emulator, cloud = setup
    sim.inject_create_fault("zone-a", "capacity", times=-1)  # zone-a stays full
    events: list[tuple[str, str]] = []
    provisioner = Provisioner(cloud, "c", ZONES, clock=clock, poll_interval_s=1.0,
                              record=lambda kind, message, *args, **kw: events.append((kind, message)))
    started = clock.now()

    nodes = provisioner.converge(desired_slices(spec(count=1, queued=True, queue_wait_s=30)), timeout_s=600)

    assert [(n.name, n.zone, n.state) for n in nodes] == [("c-s0", "zone-b", NodeState.READY)]
    assert clock.now() - started >= 30  # it did wait in zone-a first
    created = [r.parent.rsplit("/", 1)[1] for r in emulator.requests_of("CreateQueuedResource")]
    assert created == ["zone-a", "zone-b"]
    assert [(q.zone, q.state) for q in sim.all_queued_resources()] == [("zone-b", QueuedResourceState.ACTIVE)]
    assert [r.force for r in emulator.requests_of("DeleteQueuedResource")] == [True]  # zone-a's, withdrawn
    [fallback] = [message for kind, message in events if kind == "zone_fallback"]
    assert "waited" in fallback and "capacity in zone-a; trying zone-b" in fallback


def test_without_queue_wait_s_a_queued_slice_waits_in_its_zone_and_a_timeout_withdraws_it(setup) -> None:  # type: ignore[no-untyped-def]
    clock, sim, emulator, cloud = setup
    sim.inject_create_fault("zone-a", "capacity", times=-1)
    provisioner = Provisioner(cloud, "c", ZONES, clock=clock, poll_interval_s=1.0)
    with pytest.raises(TimeoutExceededError, match="queued resource WAITING_FOR_RESOURCES"):
        provisioner.converge(desired_slices(spec(count=1, queued=True)), timeout_s=120)
    assert sim.all_queued_resources() == [] and sim.all_nodes() == []  # nothing left queued
    assert [r.parent.rsplit("/", 1)[1] for r in emulator.requests_of("CreateQueuedResource")] == ["zone-a"]


class _QuietGang:
    """The parts of a gang the health monitor reads: no host has a notice (the cloud is checked)."""

    hosts: list = []

    def any_notice(self, index: int) -> bool:
        return False

    def signal(self, signum: int) -> None:
        raise AssertionError("no notice, no signal")


def test_a_suspended_spot_queued_slice_is_seen_within_one_health_interval_and_replaced(  # type: ignore[no-untyped-def]
        setup, tmp_path) -> None:
    """The supervisor's path on the real client: its health check lists the zone through
    google-cloud-tpu and sees the slice gone at the next interval; its recovery (the runtime's
    delete_slices, restore_slices) deletes the SUSPENDED queued resource with force and queues
    the slice again."""
    from podmanager.cluster.cluster_runtime import ClusterRuntime
    from podmanager.core.records import SliceRef
    from podmanager.state import StateStore
    from podmanager.supervision.health import HealthMonitor

    clock, sim, emulator, cloud = setup
    data = {"name": "c", "project": "my-project", "backend": "simulated", "zones": ZONES,
            "simulation": {"boot_hosts": False},
            "slices": [{"accelerator": "v4-16", "count": 1, "queued": True, "capacity": "spot"}]}
    runtime = ClusterRuntime(parse_spec(data), store=StateStore(tmp_path / "state.db"), clock=clock, cloud=cloud)
    [node] = runtime.restore_slices(timeout_s=300)
    monitor = HealthMonitor(cloud, [SliceRef(0, node.zone, node.name)], _QuietGang(), interval_s=1.0,  # type: ignore[arg-type]
                            clock=clock)
    assert monitor.check() is None

    sim.preempt(node.zone, node.name)  # the service takes the spot slice back: SUSPENDING, then SUSPENDED
    clock.advance(1.0)  # one health interval
    assert monitor.check() == "slice 0 (c-s0) is gone"
    assert [q.state for q in cloud.list_queued_resources("zone-a")] == [QueuedResourceState.SUSPENDED]

    runtime.delete_slices([0], reason="preempted")
    assert sim.all_queued_resources() == [] and sim.all_nodes() == []
    [again] = runtime.restore_slices(timeout_s=300)
    assert (again.name, again.state) == ("c-s0", NodeState.READY)
    assert [q.state for q in cloud.list_queued_resources("zone-a")] == [QueuedResourceState.ACTIVE]
    assert [r.force for r in emulator.requests_of("DeleteQueuedResource")] == [True]
    assert len(emulator.requests_of("CreateQueuedResource")) == 2


def test_a_queued_slice_waiting_for_capacity_is_reported_waiting_and_ready_only_when_granted(setup) -> None:  # type: ignore[no-untyped-def]
    """The queued resource's create operation returns when the request is accepted; the slice is
    READY only when its node is, after capacity came (here: when the wait is first reported)."""
    clock, sim, emulator, cloud = setup
    sim.inject_create_fault("zone-a", "capacity", times=-1)
    events: list[tuple[str, str]] = []

    def record(kind: str, message: str, index: int | None, **data: object) -> None:
        events.append((kind, message))
        if kind == "slice_waiting":
            sim.clear_faults()  # capacity comes back

    provisioner = Provisioner(cloud, "c", ZONES, record=record, clock=clock, poll_interval_s=1.0)
    nodes = provisioner.converge(desired_slices(spec(count=1, queued=True)), timeout_s=300)
    assert [(n.state, n.zone) for n in nodes] == [(NodeState.READY, "zone-a")]
    kinds = [kind for kind, _ in events]
    assert kinds[:3] == ["slice_creating", "slice_queued", "slice_waiting"], events
    assert kinds.count("slice_ready") == 1 and kinds[-1] == "slice_ready", events  # then its node CREATING, READY
    assert "c-s0 is waiting for capacity in zone-a (queued resource c-s0 is WAITING_FOR_RESOURCES)" in events[2][1]
