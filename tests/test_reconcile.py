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


def node(name, state=NodeState.READY, accelerator="v4-16", zone="a"):
    return Node(name=name, zone=zone, accelerator_type=accelerator, state=state,
                labels={"podmanager-cluster": "c", "podmanager-slice": name[-1]})


def test_desired_slices_have_stable_names_and_labels():
    assert [d.node_name for d in DESIRED] == ["c-s0", "c-s1"]
    assert DESIRED[1].request.labels == {"podmanager-cluster": "c", "podmanager-slice": "1"}


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
    assert plan(desired, Observed((), (failed,))) == [DeleteQueuedResource("c-s0", "a", "queued resource failed", 0)]
    active = QueuedResource("c-s0", "a", "c-s0", QueuedResourceState.ACTIVE, {"podmanager-cluster": "c"})
    # A preempted node of a queued resource goes by deleting the queued resource.
    assert plan(desired, Observed((node("c-s0", NodeState.PREEMPTED),), (active,))) == [
        DeleteQueuedResource("c-s0", "a", "node is PREEMPTED", 0)]
