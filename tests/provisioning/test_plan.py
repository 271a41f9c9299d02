"""The pure planner: desired vs observed -> actions."""

from podmanager.cloud.base import Node, NodeState, QueuedResource, QueuedResourceState
from podmanager.core.spec import parse_spec
from podmanager.provisioning.plan import (
    CreateSlice,
    DeleteNode,
    DeleteQueuedResource,
    NoZoneLeft,
    Observed,
    converged,
    desired_slices,
    plan,
)

SPEC = parse_spec({"name": "c", "backend": "simulated", "zones": ["a", "b"],
                   "slices": [{"accelerator": "v4-16", "count": 2}]})
DESIRED = desired_slices(SPEC)


def node(name, state=NodeState.READY, accelerator="v4-16", zone="a", health=None):
    return Node(name=name, zone=zone, accelerator_type=accelerator, state=state, health=health,
                labels={"podmanager-cluster": "c", "podmanager-slice": name[-1]})


def queued(state, name="c-s0"):
    return QueuedResource(name, "a", name, state, {"podmanager-cluster": "c", "podmanager-slice": name[-1]})


QUEUED = desired_slices(parse_spec({"name": "c", "backend": "simulated", "zones": ["a"],
                                    "slices": [{"accelerator": "v4-16", "queued": True, "capacity": "spot"}]}))


def test_desired_slices_have_stable_names_and_labels():
    assert [d.node_name for d in DESIRED] == ["c-s0", "c-s1"]
    labels = DESIRED[1].request.labels
    assert {k: v for k, v in labels.items() if k != "podmanager-boot"} == {"podmanager-cluster": "c",
                                                                             "podmanager-slice": "1"}
    assert labels["podmanager-boot"] == DESIRED[0].request.labels["podmanager-boot"]  # one boot, every slice


def test_empty_cloud_creates_every_slice_in_the_first_zone():
    assert plan(DESIRED, Observed()) == [CreateSlice(DESIRED[0], "a"), CreateSlice(DESIRED[1], "a")]


def test_nothing_to_do_when_everything_is_ready_or_in_progress():
    observed = Observed((node("c-s0"), node("c-s1", NodeState.CREATING)))
    assert plan(DESIRED, observed) == []
    assert not converged(DESIRED, observed)
    assert converged(DESIRED, Observed((node("c-s0"), node("c-s1"))))


def test_dead_nodes_are_deleted_then_recreated_in_a_later_pass():
    for state in (NodeState.PREEMPTED, NodeState.TERMINATED):
        actions = plan(DESIRED, Observed((node("c-s0", state), node("c-s1"))))
        assert actions == [DeleteNode("c-s0", "a", f"node is {state.value}", 0)]
    assert plan(DESIRED, Observed((node("c-s0", NodeState.DELETING), node("c-s1")))) == []
    assert plan(DESIRED, Observed((node("c-s1"),))) == [CreateSlice(DESIRED[0], "a")]


def test_unwanted_and_changed_nodes_are_deleted():
    observed = Observed((node("c-s0", accelerator="v4-8"), node("c-s1"), node("c-s7")))
    actions = plan(DESIRED, observed)
    assert DeleteNode("c-s0", "a", "accelerator changed from v4-8 to v4-16", 0) in actions
    assert DeleteNode("c-s7", "a", "not in the spec", None) in actions
    assert len(actions) == 2


def test_teardown_deletes_everything():
    observed = Observed((node("c-s0"), node("c-s1", NodeState.CREATING)))
    assert plan([], observed, unwanted_reason="down") == [DeleteNode("c-s0", "a", "down"), DeleteNode("c-s1", "a", "down")]
    assert converged([], Observed())


def test_exhausted_zones_move_the_slice_then_give_up():
    assert plan(DESIRED[:1], Observed(), {0: {"a"}}) == [CreateSlice(DESIRED[0], "b")]
    assert plan(DESIRED[:1], Observed(), {0: {"a", "b"}}) == [NoZoneLeft(DESIRED[0], ("a", "b"))]


def test_queued_slices():
    spec = parse_spec({"name": "c", "backend": "simulated", "zones": ["a"],
                       "slices": [{"accelerator": "v4-16", "queued": True}]})
    desired = desired_slices(spec)
    waiting = QueuedResource("c-s0", "a", "c-s0", QueuedResourceState.WAITING_FOR_RESOURCES, {"podmanager-cluster": "c"})
    assert plan(desired, Observed((), (waiting,))) == []
    failed = QueuedResource("c-s0", "a", "c-s0", QueuedResourceState.FAILED, {"podmanager-cluster": "c"})
    assert plan(desired, Observed((), (failed,))) == [DeleteQueuedResource("c-s0", "a", "queued resource is FAILED", 0)]
    active = QueuedResource("c-s0", "a", "c-s0", QueuedResourceState.ACTIVE, {"podmanager-cluster": "c"})
    # A preempted node of a queued resource goes by deleting the queued resource.
    assert plan(desired, Observed((node("c-s0", NodeState.PREEMPTED),), (active,))) == [
        DeleteQueuedResource("c-s0", "a", "node is PREEMPTED", 0)]


def test_failed_and_suspended_queued_resources_are_deleted_then_created_again():
    for state in (QueuedResourceState.FAILED, QueuedResourceState.SUSPENDED):
        assert plan(QUEUED, Observed((), (queued(state),))) == [
            DeleteQueuedResource("c-s0", "a", f"queued resource is {state.value}", 0)]
        assert not converged(QUEUED, Observed((node("c-s0"),), (queued(state),)))
    # Once it is gone the slice is created again.
    assert plan(QUEUED, Observed()) == [CreateSlice(QUEUED[0], "a")]


def test_a_suspending_queued_resource_is_waited_out_not_deleted_twice():
    suspending = queued(QueuedResourceState.SUSPENDING)
    assert plan(QUEUED, Observed((), (suspending,))) == []
    assert plan(QUEUED, Observed((node("c-s0", NodeState.PREEMPTED),), (suspending,))) == []
    assert plan(QUEUED, Observed((), (queued(QueuedResourceState.DELETING),))) == []


def test_queued_resources_on_their_way_hold_their_slice():
    for state in (QueuedResourceState.WAITING_FOR_RESOURCES, QueuedResourceState.ACCEPTED,
                  QueuedResourceState.PROVISIONING, QueuedResourceState.CREATING):
        assert plan(QUEUED, Observed((), (queued(state),))) == []
    assert converged(QUEUED, Observed((node("c-s0"),), (queued(QueuedResourceState.ACTIVE),)))


def test_unknown_after_a_failed_repair_is_replaced_at_once():
    assert plan(DESIRED, Observed((node("c-s0", NodeState.UNKNOWN), node("c-s1")))) == [
        DeleteNode("c-s0", "a", "node is UNKNOWN", 0)]


def test_hidden_and_unhealthy_nodes_are_waited_for_then_replaced_when_overdue():
    waiting = [node("c-s0", state) for state in (NodeState.HIDING, NodeState.HIDDEN, NodeState.UNHIDING)]
    waiting += [node("c-s0", health=health) for health in ("TIMEOUT", "UNHEALTHY_MAINTENANCE")]
    for first in waiting:
        observed = Observed((first, node("c-s1")))
        assert plan(DESIRED, observed) == [] and not converged(DESIRED, observed)
        [replace] = plan(DESIRED, observed, overdue={"c-s0": 601.0})
        assert replace.name == "c-s0" and isinstance(replace, DeleteNode)
        assert replace.reason.startswith("node is ") and replace.reason.endswith("for 601s")
    assert plan(DESIRED, Observed((node("c-s0", health="TIMEOUT"), node("c-s1"))), overdue={"c-s0": 700})[0].reason \
        == "node is READY (TIMEOUT) for 700s"
    # A TensorFlow health report says nothing about a JAX slice.
    assert converged(DESIRED, Observed((node("c-s0", health="UNHEALTHY_TENSORFLOW"), node("c-s1", health="HEALTHY"))))


def test_an_overdue_hidden_queued_slice_goes_with_its_queued_resource():
    observed = Observed((node("c-s0", NodeState.HIDDEN),), (queued(QueuedResourceState.ACTIVE),))
    assert plan(QUEUED, observed) == []
    assert plan(QUEUED, observed, overdue={"c-s0": 600.0}) == [
        DeleteQueuedResource("c-s0", "a", "node is HIDDEN for 600s", 0)]


def test_the_state_table_covers_every_state():
    from podmanager.cloud.base import DEAD_STATES, NODE_DECISIONS, QUEUED_DECISIONS

    assert set(NODE_DECISIONS) == set(NodeState) and set(QUEUED_DECISIONS) == set(QueuedResourceState)
    assert DEAD_STATES == {NodeState.PREEMPTED, NodeState.TERMINATED, NodeState.STOPPED, NodeState.UNKNOWN}
