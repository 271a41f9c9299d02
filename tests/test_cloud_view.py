"""The cloud's view of a cluster's slices that its monitor keeps (cluster/cloud_view.py):
when `status` may show it, and which nodes' boot stages a round asks the cloud for again."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from podmanager.cloud.base import GuestAttribute, Node, NodeState
from podmanager.cluster import cloud_view
from podmanager.cluster.cloud_view import CloudView
from podmanager.vm.boot_status import NAMESPACE, STAGE_KEY


def node(name: str, state: NodeState = NodeState.READY, created: float = 1.0, workers: int = 2) -> Node:
    return Node(name=name, zone="sim-zone-a", accelerator_type="v4-16", state=state, labels={},
                endpoints=tuple(f"10.0.0.{w}" for w in range(workers)), create_time=created)


class FakeCloud:
    """Answers GetGuestAttributes with each worker's stage, counting the nodes asked."""

    def __init__(self, stages: dict[str, list[str]]):
        self.stages = stages
        self.asked: list[str] = []

    def guest_attributes(self, zone, node_id, query_path="", worker=None):  # type: ignore[no-untyped-def]
        self.asked.append(node_id)
        return [GuestAttribute(w, NAMESPACE, STAGE_KEY, stage) for w, stage in enumerate(self.stages[node_id])]


class FakeRuntime:
    def __init__(self, nodes: list[Node], cloud: FakeCloud):
        self.nodes, self.cloud, self.hosts = nodes, cloud, object()

    def observe(self):  # type: ignore[no-untyped-def]
        return type("Observed", (), {"nodes": tuple(self.nodes)})()


def test_a_round_asks_again_only_for_nodes_whose_hosts_have_not_all_joined_or_were_made_again():
    cloud = FakeCloud({"a": ["joined", "joined"], "b": ["joined", "installing"], "c": []})
    runtime = FakeRuntime([node("a"), node("b"), node("c", NodeState.CREATING)], cloud)
    first = cloud_view.observe(runtime)  # type: ignore[arg-type]
    assert cloud.asked == ["a", "b"]  # a node that is not READY has no VM to report
    assert [b.stage for b in first.boots_of(node("b")).values()] == ["joined", "installing"]

    cloud.asked.clear()
    second = cloud_view.observe(runtime, first, reread_s=60.0)  # type: ignore[arg-type]
    assert cloud.asked == ["b"] and second.boots_of(node("a")) == first.boots_of(node("a"))

    runtime.nodes[0] = node("a", created=2.0)  # made again since: its hosts boot anew
    cloud.stages["a"] = ["installing", "installing"]
    cloud.asked.clear()
    third = cloud_view.observe(runtime, second, reread_s=60.0)  # type: ignore[arg-type]
    assert cloud.asked == ["a", "b"] and {b.stage for b in third.boots_of(node("a")).values()} == {"installing"}


def test_every_node_is_asked_again_once_its_reading_is_older_than_the_reread_interval():
    cloud = FakeCloud({"a": ["joined", "joined"]})
    runtime = FakeRuntime([node("a")], cloud)
    first = cloud_view.observe(runtime)  # type: ignore[arg-type]
    old = replace(first, boots=[replace(b, read_at=b.read_at - 61.0) for b in first.boots])
    cloud.asked.clear()
    cloud_view.observe(runtime, old, reread_s=60.0)  # type: ignore[arg-type]
    assert cloud.asked == ["a"]


@pytest.mark.parametrize(("age_periods", "event_after_view", "used"), [
    (0.5, False, True),
    (2.5, False, True),
    (3.5, False, False),  # nobody wrote it for a while (no monitor): ask the cloud
    (0.5, True, False),   # podmanager changed the cluster since: ask the cloud
    (-1.0, False, False),  # from the future (another machine's clock): not trusted
])
def test_status_uses_the_view_only_while_it_is_fresh_and_newer_than_the_last_event(
        podmanager_home, age_periods, event_after_view, used):  # type: ignore[no-untyped-def]
    now = time.time()
    observed = now - age_periods * cloud_view.SIMULATED_PERIOD_S
    cloud_view.write("viewed", CloudView(observed, [node("a")]))
    last_event = observed + 0.1 if event_after_view else observed - 0.1
    found = cloud_view.read_fresh("viewed", simulated=True, newer_than=last_event, now=now)
    assert (found is not None) == used
    if used:
        assert found.nodes == [node("a")] and found.observed_at == observed


def test_a_damaged_view_is_not_used(podmanager_home):  # type: ignore[no-untyped-def]
    cloud_view.path("viewed").parent.mkdir(parents=True, exist_ok=True)
    cloud_view.path("viewed").write_text('{"observed_at": ')
    assert cloud_view.read_fresh("viewed", simulated=True, newer_than=None) is None
