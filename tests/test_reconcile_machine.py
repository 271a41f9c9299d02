"""A Hypothesis state machine over the simulator and the reconcile loop.

Whatever happens between passes — preemptions (a spot queued slice's queued resource goes
SUSPENDING, then SUSPENDED), terminations, repairs, a node HIDDEN or unhealthy for a while or
UNKNOWN after a failed repair, every create fault (capacity, reservation, preemption while
creating, an invalid request), quota, transient API errors, an interrupted `up`, the
supervisor's replacement of a slice — a finished `up` leaves exactly the spec's slices READY
(queued ones too), `down` leaves nothing of the cluster, an `up` that gave up (timed out or
stopped on an error) leaves no queued resource that could still be granted, and at no step
does a slice have two nodes or two queued resources. A queued slice in a zone without
capacity waits there (WAITING_FOR_RESOURCES) only for its `queue_wait_s`: a full zone never
holds an `up` until its timeout (every `up` below has 60 s and ends settled or with a clear stop).
"""

import itertools

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from podmanager.api import Cluster
from podmanager.cloud import errors
from podmanager.cloud.base import Decision, NodeState, decide_queued
from podmanager.core import paths
from podmanager.core.clock import FakeClock
from podmanager.core.errors import TimeoutExceededError
from podmanager.emulator.sim.cloud import SimCloud
from podmanager.state import StateStore

ZONES = ["zone-a", "zone-b"]
CLEAR_STOPS = (errors.CapacityError, errors.ReservationShortfallError, errors.QuotaError, errors.InvalidRequestError)
_machines = itertools.count()
SLICES = 3


class ProvisioningMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.clock = FakeClock()
        self.sim = SimCloud(clock=self.clock, create_latency_s=1.0, delete_latency_s=0.5)
        self.store = StateStore(paths.home() / f"machine-{next(_machines)}.db")
        spec = {"name": "m", "backend": "simulated", "zones": ZONES, "simulation": {"boot_hosts": False},
                "slices": [{"accelerator": "v4-8", "count": SLICES - 1, "capacity": "spot"},
                           {"accelerator": "v4-8", "queued": True, "capacity": "spot", "queue_wait_s": 5}]}
        self.cluster = Cluster.from_dict(spec, simulator=self.sim, clock=self.clock, store=self.store)
        self.settled = False  # the last action was a completed `up`
        self.torn_down = False
        self.gave_up = False  # the last `up` (or replacement) timed out or stopped on an error

    def nodes(self):
        return [n for n in self.sim.all_nodes() if n.cluster == "m"]

    @rule()
    def up(self):
        try:
            self.cluster.up(timeout_s=60)
        except CLEAR_STOPS:
            # Every zone out of capacity, no quota, a refused request: a legitimate, clear stop, some slices up.
            self.settled, self.torn_down, self.gave_up = False, False, True
            self.sim.clear_faults()
            return
        self.settled, self.torn_down, self.gave_up = True, False, False

    @rule(timeout=st.floats(0.1, 1.5))
    def interrupted_up(self, timeout):
        try:
            self.cluster.up(timeout_s=timeout)
            self.settled, self.torn_down, self.gave_up = True, False, False
        except (TimeoutExceededError, *CLEAR_STOPS):
            self.settled, self.torn_down, self.gave_up = False, False, True

    @rule(index=st.integers(0, SLICES - 1))
    def replace_a_slice(self, index):
        """What the supervisor does after a preemption: delete the slice, create what is missing."""
        try:
            self.cluster.runtime.delete_slices([index], reason="test")
            self.cluster.runtime.restore_slices(timeout_s=60)
            self.settled, self.torn_down, self.gave_up = True, False, False
        except CLEAR_STOPS:
            self.settled, self.torn_down, self.gave_up = False, False, True
            self.sim.clear_faults()

    @rule()
    def down(self):
        self.cluster.down()
        self.settled, self.torn_down, self.gave_up = False, True, False

    @rule(index=st.integers(0, SLICES - 1), terminate=st.booleans())
    def lose_a_slice(self, index, terminate):
        for node in self.nodes():
            if node.slice_index == index and node.state is NodeState.READY:
                if terminate:
                    self.sim.terminate(node.zone, node.name)
                else:
                    self.sim.preempt(node.zone, node.name)
                self.settled = False

    @rule(index=st.integers(0, SLICES - 1), seconds=st.floats(0.5, 5))
    def repair_a_slice(self, index, seconds):
        for node in self.nodes():
            if node.slice_index == index and node.state is NodeState.READY:
                self.sim.repair(node.zone, node.name, seconds)  # comes back READY on its own
                self.settled = False

    @rule(index=st.integers(0, SLICES - 1), notice=st.floats(0, 3), seconds=st.floats(0.5, 5))
    def announce_maintenance(self, index, notice, seconds):
        """Host maintenance announced on the slice's node (the `maintenance` fault): REPAIRING
        once its window opens, READY again after it."""
        self.sim.maintain_slice_later(self.cluster.name, index, 0.0, notice, seconds)
        self.settled = False

    @rule(index=st.integers(0, SLICES - 1),
          condition=st.sampled_from([(NodeState.HIDDEN, None), (NodeState.UNHIDING, None), (None, "TIMEOUT"),
                                     (None, "UNHEALTHY_MAINTENANCE"), (NodeState.UNKNOWN, None)]),
          seconds=st.floats(0.5, 5))
    def degrade_a_slice(self, index, condition, seconds):
        """HIDDEN or unhealthy for a while (then READY again), or UNKNOWN after a failed repair (for good)."""
        state, health = condition
        for node in self.nodes():
            if node.slice_index == index and node.state is NodeState.READY:
                self.sim.degrade(node.zone, node.name, state=state, health=health,
                                 for_s=None if state is NodeState.UNKNOWN else seconds)
                self.settled = False

    @rule(zone=st.sampled_from(ZONES),
          kind=st.sampled_from(["capacity", "reservation", "preempt-while-creating", "invalid-request"]),
          times=st.integers(1, 3))
    def create_fails(self, zone, kind, times):
        self.sim.inject_create_fault(zone, kind, times)

    @rule(zone=st.sampled_from(ZONES))
    def zone_full_until_cleared(self, zone):
        """Creates there fail and queued resources wait there, until an `up` stops and clears it."""
        self.sim.inject_create_fault(zone, "capacity", -1)

    @rule(times=st.integers(1, 2))
    def no_quota(self, times):
        self.sim.inject_quota(times=times)

    @rule(calls=st.integers(1, 4))
    def api_hiccups(self, calls):
        self.sim.inject_transient(calls)  # retried by the client within its deadline

    @rule(seconds=st.floats(0, 2))
    def time_passes(self, seconds):
        self.clock.advance(seconds)
        if any(n.state is not NodeState.READY for n in self.nodes()):
            self.settled = False

    @invariant()
    def never_two_nodes_or_queued_resources_for_a_slice(self):
        per_slice = [n.slice_index for n in self.nodes()]
        assert len(per_slice) == len(set(per_slice)), per_slice
        queued = [q.node_name for q in self.sim.all_queued_resources() if q.cluster == "m"]
        assert len(queued) == len(set(queued)), queued

    @invariant()
    @precondition(lambda self: self.settled)
    def up_leaves_every_slice_ready_and_nothing_else(self):
        nodes = self.nodes()
        assert sorted(n.name for n in nodes) == [f"m-s{i}" for i in range(SLICES)]
        assert all(n.state is NodeState.READY for n in nodes)

    @invariant()
    @precondition(lambda self: self.gave_up)
    def an_up_that_gave_up_leaves_nothing_that_could_still_be_granted(self):
        waiting = [(q.name, q.state.value) for q in self.sim.all_queued_resources()
                   if q.cluster == "m" and decide_queued(q) is Decision.WAIT]
        assert waiting == []

    @invariant()
    @precondition(lambda self: self.torn_down)
    def down_leaves_nothing(self):
        assert self.nodes() == []
        assert [q for q in self.sim.all_queued_resources() if q.cluster == "m"] == []

    def teardown(self):
        self.cluster.down()
        assert self.nodes() == []
        self.store.close()


ProvisioningMachine.TestCase.settings = settings(max_examples=25, stateful_step_count=12, deadline=None)
TestProvisioningMachine = ProvisioningMachine.TestCase
