"""The simulated Cloud TPU: its state machine, operations, persistence and every fault."""

import pytest

from podmanager.cloud import errors
from podmanager.cloud.base import NodeRequest, NodeState, QueuedResourceState
from podmanager.core.spec import Capacity
from podmanager.emulator.sim.cloud import SimCloud
from podmanager.emulator.sim.records import SimState

REQUEST = NodeRequest("v4-16", "tpu-ubuntu2204-base", Capacity.SPOT, labels={"podmanager-cluster": "c", "podmanager-slice": "0"})


@pytest.fixture
def sim(clock):  # replaces conftest's: the tests here count a delete as taking 1 s
    return SimCloud(clock=clock, create_latency_s=2.0, delete_latency_s=1.0)


def test_create_goes_creating_then_ready_and_operation_completes(sim, clock):
    operation = sim.create_node("z", "n", REQUEST)
    assert not operation.done
    assert sim.get_node("z", "n").state is NodeState.CREATING
    clock.advance(1.9)
    assert not sim.get_operation(operation.name).done
    clock.advance(0.2)
    node = sim.get_node("z", "n")
    assert node.state is NodeState.READY and node.health == "HEALTHY"
    assert len(node.endpoints) == 2  # v4-16 has two hosts
    assert sim.get_operation(operation.name) == operation.__class__(operation.name, True, None)


def test_delete_goes_deleting_then_gone(sim, clock):
    sim.create_node("z", "n", REQUEST)
    clock.advance(2)
    sim.delete_node("z", "n")
    assert sim.get_node("z", "n").state is NodeState.DELETING
    clock.advance(1)
    with pytest.raises(errors.NotFoundError):
        sim.get_node("z", "n")
    with pytest.raises(errors.NotFoundError):
        sim.delete_node("z", "n")


def test_duplicate_create_and_unknown_type_are_rejected(sim):
    sim.create_node("z", "n", REQUEST)
    with pytest.raises(errors.AlreadyExistsError):
        sim.create_node("z", "n", REQUEST)
    with pytest.raises(errors.InvalidRequestError, match="v9-8"):
        sim.create_node("z", "m", NodeRequest("v9-8", "rt"))


def test_unknown_zone_is_rejected_when_zones_are_configured(clock):
    sim = SimCloud(clock=clock, zones=["a"])
    with pytest.raises(errors.InvalidRequestError, match="known zones: a"):
        sim.list_nodes("b")


@pytest.mark.parametrize("kind, error", [
    ("capacity", errors.CapacityError),
    ("reservation", errors.ReservationShortfallError),
])
def test_create_faults_fail_the_operation_and_leave_no_node(sim, clock, kind, error):
    sim.inject_create_fault("z", kind, times=1)
    operation = sim.create_node("z", "n", REQUEST)
    clock.advance(1)
    assert isinstance(sim.get_operation(operation.name).error, error)
    assert sim.list_nodes("z") == []
    assert sim.pending_faults().create == {}  # used up: nothing left waiting to happen
    sim.create_node("z", "n", REQUEST)  # the fault was for one create only
    clock.advance(2)
    assert sim.get_node("z", "n").state is NodeState.READY


def test_capacity_fault_until_cleared(sim, clock):
    sim.inject_create_fault("z", "capacity", times=-1)
    for i in range(3):
        operation = sim.create_node("z", f"n{i}", REQUEST)
        clock.advance(1)
        assert isinstance(sim.get_operation(operation.name).error, errors.CapacityError)
    sim.create_node("other", "n", REQUEST)  # other zones are unaffected
    clock.advance(2)
    assert sim.get_node("other", "n").state is NodeState.READY


def test_preempted_while_creating_leaves_a_preempted_node(sim, clock):
    sim.inject_create_fault("z", "preempt-while-creating")
    operation = sim.create_node("z", "n", REQUEST)
    clock.advance(2)
    assert isinstance(sim.get_operation(operation.name).error, errors.PreemptedWhileCreatingError)
    assert sim.get_node("z", "n").state is NodeState.PREEMPTED  # it still holds quota until deleted


def test_quota_fault_is_synchronous_and_names_the_quota(sim):
    sim.inject_quota("TPUV4PodPerProjectPerZone", times=1)
    with pytest.raises(errors.QuotaError) as raised:
        sim.create_node("z", "n", REQUEST)
    assert raised.value.quota == "TPUV4PodPerProjectPerZone"
    assert sim.list_nodes("z") == []
    sim.create_node("z", "n", REQUEST)


def test_transient_fault_fails_the_next_calls(sim):
    sim.inject_transient(2)
    for _ in range(2):
        with pytest.raises(errors.TransientError):
            sim.list_nodes("z")
    assert sim.list_nodes("z") == []


def test_preempt_now_and_with_notice(sim, clock):
    sim.create_node("z", "spot", REQUEST)
    sim.create_node("z", "ondemand", NodeRequest("v4-8", "rt", Capacity.ON_DEMAND))
    clock.advance(2)
    sim.preempt("z", "spot")
    assert sim.get_node("z", "spot").state is NodeState.PREEMPTED
    sim.preempt("z", "ondemand", notice_s=5)
    assert sim.notice_announced("z", "ondemand")
    assert sim.get_node("z", "ondemand").state is NodeState.READY
    clock.advance(5)
    assert sim.get_node("z", "ondemand").state is NodeState.TERMINATED  # on-demand VMs are terminated, not preempted


def test_scheduled_slice_preemption_hits_whichever_node_holds_the_slice(sim, clock):
    sim.create_node("z", "n", REQUEST)
    sim.preempt_slice_later("c", 0, after_s=10)
    clock.advance(9)
    assert sim.get_node("z", "n").state is NodeState.READY
    clock.advance(1)
    assert sim.get_node("z", "n").state is NodeState.PREEMPTED


def test_repair_and_terminate(sim, clock):
    sim.create_node("z", "n", REQUEST)
    clock.advance(2)
    sim.repair("z", "n", duration_s=3)
    assert sim.get_node("z", "n").state is NodeState.REPAIRING
    clock.advance(3)
    assert sim.get_node("z", "n").state is NodeState.READY
    sim.terminate("z", "n")
    assert sim.get_node("z", "n").state is NodeState.TERMINATED


def test_queued_resource_provisions_then_deletes_its_node(sim, clock):
    sim.create_queued_resource("z", "q", "n", REQUEST)
    assert sim.list_queued_resources("z")[0].state is QueuedResourceState.PROVISIONING
    clock.advance(2)
    assert sim.list_queued_resources("z")[0].state is QueuedResourceState.ACTIVE
    assert sim.list_queued_resources("z")[0].labels["podmanager-cluster"] == "c"
    sim.delete_queued_resource("z", "q")
    clock.advance(1)
    assert sim.list_queued_resources("z") == [] and sim.list_nodes("z") == []


def test_listeners_hear_every_node_change(sim, clock):
    heard = []
    sim.listeners.append(lambda before, after: heard.append(
        (before.state.value if before else None, after.state.value if after else None)))
    sim.create_node("z", "n", REQUEST)
    clock.advance(2)
    sim.list_nodes("z")
    sim.preempt("z", "n")
    sim.delete_node("z", "n")
    clock.advance(1)
    sim.list_nodes("z")
    assert heard == [(None, "CREATING"), ("CREATING", "READY"), ("READY", "PREEMPTED"),
                     ("PREEMPTED", "DELETING"), ("DELETING", None)]


def test_a_snapshot_carries_on_where_it_left_off(clock):
    first = SimCloud(clock=clock, create_latency_s=1)
    first.create_node("z", "n", REQUEST)
    version, saved = first.snapshot()
    first.saved(version)
    assert first.snapshot() is None  # nothing changed since: nothing to save
    clock.advance(1)
    second = SimCloud(clock=clock, state=SimState.model_validate_json(saved), create_latency_s=1)
    assert second.get_node("z", "n").state is NodeState.READY  # what was due when it stopped happens
    second.preempt("z", "n")
    assert second.get_node("z", "n").state is NodeState.PREEMPTED
    assert second.known_zones() == ["z"]


def test_tick_applies_what_is_due_without_any_call(clock):
    heard = []
    sim = SimCloud(clock=clock, create_latency_s=1,
                   listeners=[lambda before, after: heard.append(after.state.value if after else None)])
    sim.create_node("z", "n", REQUEST)
    sim.preempt_slice_later("c", 0, after_s=5)
    start = clock.now()
    assert sim.tick() == start + 1  # the node's readiness is next
    clock.advance(1)
    assert sim.tick() == start + 5 and heard == ["CREATING", "READY"]
    clock.advance(4)
    assert sim.tick() is None  # the timed fault fired (on no node of cluster c): nothing pending
