"""Provisioning through the Cluster API against the simulator (state asserted, not calls)."""

import pytest
from sim_view import sim_nodes

from podmanager.api import Cluster, down_by_label
from podmanager.cloud import errors
from podmanager.cloud.base import NodeRequest, NodeState
from podmanager.cloud.retry import RetryingCloud
from podmanager.core.errors import TimeoutExceededError
from podmanager.state import StateStore

ZONES = ["zone-a", "zone-b"]


def spec(count=2, **slice_fields):
    return {"name": "c", "backend": "simulated", "zones": ZONES,
            "simulation": {"boot_hosts": False},
            "slices": [{"accelerator": "v4-16", "count": count, **slice_fields}]}


def cluster_on(sim, clock, data):
    return Cluster.from_dict(data, simulator=sim, clock=clock)


def kinds(cluster):
    return [e.kind for e in cluster.events()]


def test_up_creates_every_slice_and_status_reports_them(sim, clock):
    cluster = cluster_on(sim, clock, spec(count=3))
    status = cluster.up()
    assert [(s.name, s.state, s.zone, s.hosts) for s in status.slices] == [
        (f"c-s{i}", "READY", "zone-a", 2) for i in range(3)]
    assert sorted(n.name for n in sim.all_nodes()) == ["c-s0", "c-s1", "c-s2"]
    assert kinds(cluster).count("slice_ready") == 3
    assert cluster.store.get_cluster("c").status == "up"


def test_slices_are_created_concurrently(sim, clock):
    start = clock.now()
    cluster_on(sim, clock, spec(count=64)).up()
    elapsed = clock.now() - start
    assert len(sim.all_nodes()) == 64
    assert elapsed < 2 * 2.0, f"64 slices took {elapsed:.1f}s of simulated time; one create takes 2s"


def test_capacity_error_moves_the_slice_to_the_next_zone(sim, clock):
    sim.inject_create_fault("zone-a", "capacity", times=-1)
    cluster = cluster_on(sim, clock, spec(count=2))
    status = cluster.up()
    assert {s.zone for s in status.slices} == {"zone-b"}
    assert kinds(cluster).count("zone_fallback") == 2


def test_no_capacity_anywhere_stops_with_the_zones_named(sim, clock):
    for zone in ZONES:
        sim.inject_create_fault(zone, "capacity", times=-1)
    with pytest.raises(errors.CapacityError, match="no capacity in any zone of zone-a, zone-b"):
        cluster_on(sim, clock, spec(count=1)).up()
    assert sim.all_nodes() == []


def test_quota_error_stops_and_names_the_quota(sim, clock):
    sim.inject_quota("TPUV4PodPerProjectPerZone", times=5)
    with pytest.raises(errors.QuotaError, match="TPUV4PodPerProjectPerZone"):
        cluster_on(sim, clock, spec(count=1)).up()
    assert sim.all_nodes() == []


def test_transient_errors_are_retried_and_recorded(sim, clock):
    sim.inject_transient(3)
    cluster = cluster_on(sim, clock, spec(count=1))
    assert cluster.up().slices[0].state == "READY"
    assert kinds(cluster).count("retry") == 1  # three alike failures in a row are one outage, one event


def test_transient_errors_forever_give_up_with_a_clear_message(sim, clock):
    sim.inject_transient(10_000)
    cluster = Cluster.from_dict(spec(count=1), cloud=RetryingCloud(sim, clock=clock, deadline_s=30), clock=clock)
    with pytest.raises(errors.TransientError, match="gave up on list_nodes after 30s"):
        cluster.up()


def test_up_again_after_an_interrupted_up_finishes_without_duplicates(sim, clock):
    with pytest.raises(TimeoutExceededError, match="c-s0 \\(CREATING\\)"):
        cluster_on(sim, clock, spec(count=2)).up(timeout_s=0.5)
    assert {n.state for n in sim.all_nodes()} == {NodeState.CREATING}
    cluster = cluster_on(sim, clock, spec(count=2))
    cluster.up()
    assert sorted(n.name for n in sim.all_nodes()) == ["c-s0", "c-s1"]
    assert kinds(cluster).count("slice_creating") == 2  # the second up created nothing


def test_preempted_slices_are_deleted_and_replaced_by_the_next_pass(sim, clock):
    cluster = cluster_on(sim, clock, spec(count=2, capacity="spot"))
    cluster.up()
    sim.preempt("zone-a", "c-s1")
    assert cluster.status().slices[1].state == "PREEMPTED"
    cluster.up()
    assert [s.state for s in cluster.status().slices] == ["READY", "READY"]
    deleted = [e for e in cluster.events() if e.kind == "slice_deleting"]
    assert [(e.slice_index, e.data.reason) for e in deleted] == [(1, "node is PREEMPTED")]


def test_preempted_while_creating_is_replaced(sim, clock):
    sim.inject_create_fault("zone-a", "preempt-while-creating", times=1)
    cluster = cluster_on(sim, clock, spec(count=1))
    assert cluster.up().slices[0].state == "READY"
    assert "slice_preempted" in kinds(cluster)


def test_queued_slices_get_a_queued_resource_that_down_removes(sim, clock):
    cluster = cluster_on(sim, clock, spec(count=1, queued=True))
    cluster.up()
    assert [q.name for q in sim.all_queued_resources()] == ["c-s0"]
    cluster.down()
    assert sim.all_nodes() == [] and sim.all_queued_resources() == []


def test_a_timed_out_up_of_queued_slices_leaves_nothing_queued_and_says_so(sim, clock):
    sim.create_latency_s = 10_000.0
    cluster = cluster_on(sim, clock, spec(count=2, queued=True, capacity="spot"))
    with pytest.raises(TimeoutExceededError) as gave_up:
        cluster.up(timeout_s=300)
    assert gave_up.value.exit_code == 3
    assert "deleted the queued resource(s) it had created and not yet granted (c-s0, c-s1)" in str(gave_up.value)
    assert sim.all_queued_resources() == [] and sim.all_nodes() == []


def test_a_preempted_spot_queued_slice_is_replaced_by_the_next_up(sim, clock):
    cluster = cluster_on(sim, clock, spec(count=1, queued=True, capacity="spot"))
    cluster.up()
    sim.preempt("zone-a", "c-s0")
    clock.advance(1.0)
    assert [q.state.value for q in sim.all_queued_resources()] == ["SUSPENDED"] and sim.all_nodes() == []
    assert cluster.plan_up().changes[0].kind == "replace"

    assert cluster.up(timeout_s=300).slices[0].state == "READY"
    assert [q.state.value for q in sim.all_queued_resources()] == ["ACTIVE"]


def test_the_supervisors_replacement_of_a_suspended_spot_queued_slice(sim, clock):
    cluster = cluster_on(sim, clock, spec(count=1, queued=True, capacity="spot"))
    cluster.up()
    sim.preempt("zone-a", "c-s0")  # SUSPENDING: the service is taking it back

    cluster.runtime.delete_slices([0], reason="preempted")
    assert sim.all_queued_resources() == [] and sim.all_nodes() == []
    [node] = cluster.runtime.restore_slices(timeout_s=300)
    assert node.state is NodeState.READY and [q.state.value for q in sim.all_queued_resources()] == ["ACTIVE"]


def test_two_runs_recovering_their_slices_create_each_once_with_its_boot_metadata(sim, clock):
    """Two runs, one slice each, both preempted at once: the first recovery deletes only what
    it must and creates nothing while deleting (a slice created then would lack the metadata
    its hosts boot with); the second finds its slice made again since its incident and keeps it."""
    cluster = cluster_on(sim, clock, spec(count=2, capacity="spot"))
    cluster.up()
    incident_at = clock.now()
    sim.preempt("zone-a", "c-s0")
    sim.preempt("zone-a", "c-s1")
    clock.advance(1.0)

    cluster.runtime.delete_slices([0], reason="preemption", since=incident_at)  # run A's recovery
    assert sim.all_nodes() == []  # both dead ones deleted, neither created
    cluster.runtime.restore_slices(timeout_s=300)
    created = {n.name: n.create_time for n in sim.all_nodes()}
    assert sorted(created) == ["c-s0", "c-s1"]

    cluster.runtime.delete_slices([1], reason="preemption", since=incident_at)  # run B's, a moment later
    assert {n.name: n.create_time for n in sim.all_nodes()} == created  # kept, not replaced twice
    assert "slices_kept" in kinds(cluster)


def test_down_removes_everything_and_is_safe_twice(sim, clock):
    cluster = cluster_on(sim, clock, spec(count=2))
    cluster.up()
    sim.create_node("zone-b", "stray", NodeRequest("v4-8", "rt", labels={"podmanager-cluster": "c"}))
    other = cluster_on(sim, clock, {**spec(count=1), "name": "other"})
    other.up()
    cluster.down()
    assert [n.name for n in sim.all_nodes()] == ["other-s0"]  # only the other cluster is left
    cluster.down()
    assert cluster.store.get_cluster("c") is None


def test_down_finds_the_cluster_by_label_when_local_state_is_gone(podmanager_home):
    data = {**spec(count=2), "simulation": {"boot_hosts": False, "create_latency_s": 0.01, "delete_latency_s": 0.01}}
    Cluster.from_dict(data).up()
    (podmanager_home / "state.db").unlink()
    assert len(sim_nodes("podmanager-sim")) == 2
    down_by_label("c", dry_run=True, store=StateStore.in_memory())  # the real one is lost
    assert sim_nodes("podmanager-sim") == []


def test_scripted_faults_are_armed_once(podmanager_home):
    data = {**spec(count=1), "simulation": {"boot_hosts": False, "create_latency_s": 0.01,
                                            "faults": [{"kind": "capacity", "zone": "zone-a", "times": 1}]}}
    cluster = Cluster.from_dict(data)
    assert cluster.up().slices[0].zone == "zone-b"
    cluster.down()


def test_up_waits_for_a_repairing_slice_to_be_ready_again_and_says_so(sim, clock):
    cluster = cluster_on(sim, clock, spec(count=2))
    cluster.up()
    zone = sim.get_node(ZONES[0], "c-s0").zone
    sim.repair(zone, "c-s0", duration_s=30)
    status = cluster.up(timeout_s=120)
    assert [s.state for s in status.slices] == ["READY", "READY"]
    [said] = [e for e in cluster.events() if e.kind == "slice_repairing"]
    assert said.slice_index == 0 and "waiting up to" in said.message
    assert kinds(cluster).count("slice_creating") == 2  # repaired, never replaced


def test_a_repair_longer_than_the_timeout_names_the_repairing_slice(sim, clock):
    cluster = cluster_on(sim, clock, spec(count=1))
    cluster.up()
    sim.repair(ZONES[0], "c-s0", duration_s=600)
    with pytest.raises(TimeoutExceededError, match="c-s0 \\(REPAIRING\\)"):
        cluster.up(timeout_s=10)


def test_one_outage_of_the_api_is_one_retry_event(sim, clock):
    from podmanager.api import Cluster

    spec = {"name": "c", "backend": "simulated", "simulation": {"boot_hosts": False},
            "slices": [{"accelerator": "v4-8"}]}
    cluster = Cluster.from_dict(spec, simulator=sim, clock=clock)
    sim.inject_transient(12)  # as a dead emulator answers every call for a while
    assert cluster.up().slices[0].state == "READY"
    retries = [e.message for e in cluster.events() if e.kind == "retry"]
    assert len(retries) == 1 and "retrying until the API answers" in retries[0]
    clock.advance(120)  # a later outage is news again
    sim.inject_transient(3)
    cluster.up()
    assert [e.kind for e in cluster.events()].count("retry") == 2
