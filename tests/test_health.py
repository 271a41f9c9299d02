"""The health monitor's checks, on the simulator and a fake gang, with a manual clock."""

import signal
from dataclasses import dataclass, field

import pytest

from podmanager.attempts.gang import HostState
from podmanager.cloud.base import NodeRequest, NodeState
from podmanager.core.clock import FakeClock
from podmanager.core.records import HostSlot, SliceRef
from podmanager.core.spec import Capacity
from podmanager.emulator.sim.cloud import SimCloud
from podmanager.runtime.contract import ProgressRecord
from podmanager.supervision.classify import Cause, classify
from podmanager.supervision.health import HealthMonitor


@dataclass
class FakeGang:
    """The two parts of a gang the monitor uses: its hosts' states and `signal`."""

    hosts: list = field(default_factory=lambda: [HostState(HostSlot(i, 0, f"c-s{i}", "127.0.0.1", 4, "v4-8"))
                                                 for i in range(2)])
    signals: list = field(default_factory=list)
    sim: object = None  # what the hosts' metadata servers would say

    def signal(self, signum):
        self.signals.append(signum)

    def any_notice(self, index):
        return self.sim.notice_announced("z", f"c-s{index}")


def setup(clock, hang_timeout_s=10.0):
    sim = SimCloud(clock=clock, create_latency_s=0.0)
    for i in range(2):
        sim.create_node("z", f"c-s{i}", NodeRequest("v4-8", "rt", Capacity.SPOT))
    gang = FakeGang(sim=sim)
    events = []
    monitor = HealthMonitor(sim, [SliceRef(0, "z", "c-s0"), SliceRef(1, "z", "c-s1")], gang, interval_s=1.0,
                            hang_timeout_s=hang_timeout_s, clock=clock,
                            on_event=lambda kind, message, index: events.append((kind, index)))
    return sim, gang, monitor, events


def test_a_preempted_slice_is_seen_at_the_next_cloud_check():
    clock = FakeClock()
    sim, gang, monitor, _ = setup(clock)
    assert monitor.check() is None
    sim.preempt("z", "c-s1")
    clock.advance(0.5)
    assert monitor.check() is None  # the cloud is checked once per interval
    clock.advance(0.5)
    assert monitor.check() == "slice 1 (c-s1) is PREEMPTED"
    seen = monitor.observation()
    assert seen.slice_states == {0: NodeState.READY, 1: NodeState.PREEMPTED}


def test_a_notice_asks_the_program_to_checkpoint_once():
    clock = FakeClock()
    sim, gang, monitor, events = setup(clock)
    assert monitor.check() is None
    sim.preempt("z", "c-s0", notice_s=30)
    clock.advance(1)
    assert monitor.check() is None  # the VM is still there: the run goes on, checkpointing
    clock.advance(1)
    assert monitor.check() is None
    assert gang.signals == [signal.SIGTERM] and events == [("preemption_notice", 0)]
    assert monitor.observation().notices == {0}


def test_no_progress_counts_as_a_hang_only_after_the_first_step():
    clock = FakeClock()
    _, gang, monitor, _ = setup(clock, hang_timeout_s=10)
    for _ in range(30):  # a long compile: no step at all, never a hang
        clock.advance(1)
        assert monitor.check() is None
    for host in gang.hosts:
        host.progress = ProgressRecord(1, time=1.0)
    assert monitor.check() is None
    gang.hosts[0].progress = ProgressRecord(2, time=2.0)
    clock.advance(1)
    assert monitor.check() is None
    gang.hosts[1].progress = ProgressRecord(2, time=2.0)  # the slowest host moved: progress
    clock.advance(1)
    assert monitor.check() is None
    clock.advance(10.5)
    reason = monitor.check()
    assert reason is not None and "no step after 2" in reason and monitor.hung


def test_two_slices_preempted_together_are_one_incident_naming_both():
    clock = FakeClock()
    sim, gang, monitor, _ = setup(clock)
    assert monitor.check() is None
    sim.preempt("z", "c-s0")
    sim.preempt("z", "c-s1")
    clock.advance(1)
    assert monitor.check() == "slice 0 (c-s0) is PREEMPTED; slice 1 (c-s1) is PREEMPTED"
    assert classify(monitor.observation()).slices == {0, 1}  # both replaced in one reconcile pass


def test_a_notice_seen_by_a_slices_hosts_asks_the_program_to_checkpoint_once():
    clock = FakeClock()
    sim, gang, monitor, _ = setup(clock)
    asked = []
    gang.any_notice = lambda index: asked.append(index) or index == 1  # slice 1's metadata announces it
    assert monitor.check() is None
    assert asked == [0, 1] and monitor.notices == {1} and gang.signals == [signal.SIGTERM]
    clock.advance(1)
    assert monitor.check() is None
    assert asked == [0, 1, 0] and gang.signals == [signal.SIGTERM]  # slice 1 is not asked again, nor signalled


def test_a_suspended_spot_queued_slice_and_an_unknown_one_are_lost_at_the_next_cloud_check():
    clock = FakeClock()
    sim = SimCloud(clock=clock, create_latency_s=0.0, delete_latency_s=0.5)
    sim.create_queued_resource("z", "c-s0", "c-s0", NodeRequest("v4-8", "rt", Capacity.SPOT))
    sim.create_node("z", "c-s1", NodeRequest("v4-8", "rt", Capacity.SPOT))
    monitor = HealthMonitor(sim, [SliceRef(0, "z", "c-s0"), SliceRef(1, "z", "c-s1")], FakeGang(sim=sim),
                            interval_s=1.0, hang_timeout_s=10.0, clock=clock, on_event=lambda *args: None)
    assert monitor.check() is None
    sim.preempt("z", "c-s0")  # SUSPENDING, then SUSPENDED with its node gone
    sim.degrade("z", "c-s1", state=NodeState.UNKNOWN)  # a failed repair
    clock.advance(1.0)
    assert monitor.check() == "slice 0 (c-s0) is gone; slice 1 (c-s1) is UNKNOWN"


@pytest.mark.parametrize("condition", [{"health": "TIMEOUT"}, {"health": "UNHEALTHY_MAINTENANCE"},
                                       {"state": NodeState.HIDDEN}], ids=["timeout", "maintenance", "hidden"])
def test_a_hidden_or_unhealthy_slice_is_waited_for_then_replaced_as_infrastructure(condition):
    clock = FakeClock()
    sim, gang, monitor, events = setup(clock)
    monitor.bounded_wait_s = 30.0
    sim.degrade("z", "c-s1", **condition)
    assert monitor.check() is None and events == [("slice_unwell", 1)]  # said once, then waited for
    clock.advance(29)
    assert monitor.check() is None and events == [("slice_unwell", 1)]
    clock.advance(1)
    reason = monitor.check()
    assert reason is not None and reason.startswith("slice 1 (c-s1) has been ") and reason.endswith("for 30s")
    incident = classify(monitor.observation())
    assert incident.cause is Cause.INFRASTRUCTURE and incident.slices == {1}  # replaced; no preemption budget paid


def test_a_slice_that_recovers_within_the_wait_is_no_incident_and_a_later_spell_counts_afresh():
    clock = FakeClock()
    sim, gang, monitor, events = setup(clock)
    monitor.bounded_wait_s = 30.0
    sim.degrade("z", "c-s0", health="TIMEOUT", for_s=20)
    assert monitor.check() is None
    clock.advance(25)  # healthy again after 20 s
    assert monitor.check() is None and monitor.unwell_since == {}
    sim.degrade("z", "c-s0", health="TIMEOUT")
    clock.advance(1)
    assert monitor.check() is None  # 25 + 1 s since the first spell began, but a new spell began now
    clock.advance(29)
    assert monitor.check() is None
    clock.advance(1)
    assert monitor.check() is not None
    assert [kind for kind, _ in events] == ["slice_unwell", "slice_unwell"]


class CountingCloud:
    """The simulator, counting the zone listings asked of it."""

    def __init__(self, sim):
        self.sim, self.lists = sim, 0

    def list_nodes(self, zone):
        self.lists += 1
        return self.sim.list_nodes(zone)


def test_the_runs_of_one_cluster_share_one_listing_per_zone_per_interval_and_see_a_loss_as_soon(tmp_path):
    from podmanager.cluster.shared_listing import SharedZoneListing

    clock = FakeClock()
    sim, gang, _, _ = setup(clock)
    counted = CountingCloud(sim)
    # Two runs' supervisors, each with its own handle on the cluster's folder (as two processes).
    monitors = [HealthMonitor(counted, [SliceRef(i, "z", f"c-s{i}")], gang, interval_s=1.0, clock=clock,
                              list_zone=SharedZoneListing(counted, tmp_path / "listing").list_nodes)
                for i in range(2)]
    for _ in range(8):  # two intervals, checked every quarter second as the attempt runner does
        assert [m.check() for m in monitors] == [None, None]
        clock.advance(0.25)
    # Each attempt's first check lists on its own (a shared listing may predate the attempt),
    # then one listing per interval serves both runs.
    assert counted.lists == 2 + 1
    sim.preempt("z", "c-s1")
    reasons = [m.check() for m in monitors]  # a new interval: listed once more, after the preemption
    assert reasons == [None, "slice 1 (c-s1) is PREEMPTED"] and counted.lists == 4
    assert monitors[1].observation().slice_states == {1: NodeState.PREEMPTED} and counted.lists == 5  # its own
