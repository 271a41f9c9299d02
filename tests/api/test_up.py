"""`up` says what it waits for, and waits out a slice under repair instead of failing."""

from __future__ import annotations

import pytest

from podmanager.api import Cluster
from podmanager.cloud.base import NodeState
from podmanager.core.errors import TimeoutExceededError
from podmanager.provisioning.loop import Provisioner
from podmanager.provisioning.plan import desired_slices

SPEC = {"name": "w", "backend": "simulated", "zones": ["zone-a"], "simulation": {"boot_hosts": False},
        "slices": [{"accelerator": "v4-8", "count": 2}]}


def kinds(cluster):
    return [e.kind for e in cluster.events()]


def test_up_waits_for_a_repairing_slice_and_says_so(sim, clock):
    cluster = Cluster.from_dict(SPEC, simulator=sim, clock=clock)
    cluster.up()
    sim.repair("zone-a", "w-s0", duration_s=30.0)
    started = clock.now()

    status = cluster.up(timeout_s=120)
    assert [s.state for s in status.slices] == ["READY", "READY"]
    assert clock.now() - started >= 30.0  # it waited for the repair, not past it
    tail = kinds(cluster)[kinds(cluster).index("up", 1):]
    assert tail.index("slice_repairing") < tail.index("slice_repaired") < tail.index("slices_ready")
    repairing = next(e for e in cluster.events() if e.kind == "slice_repairing")
    assert repairing.slice_index == 0 and "w-s0" in repairing.message and "REPAIRING" in repairing.message


def test_a_repair_longer_than_the_timeout_fails_naming_the_slice(sim, clock):
    cluster = Cluster.from_dict(SPEC, simulator=sim, clock=clock)
    cluster.up()
    sim.repair("zone-a", "w-s1", duration_s=600.0)
    with pytest.raises(TimeoutExceededError, match=r"w-s1 \(REPAIRING\)"):
        cluster.up(timeout_s=60)


def test_recovery_convergence_waits_for_a_repairing_slice_too(sim, clock):
    # Relaunching a run onto a slice under repair would only fail: recovery waits like `up`.
    cluster = Cluster.from_dict(SPEC, simulator=sim, clock=clock)
    cluster.up()
    sim.repair("zone-a", "w-s0", duration_s=30.0)
    nodes = Provisioner(sim, "w", ["zone-a"], clock=clock).converge(desired_slices(cluster.spec), 60)
    assert {n.name: n.state for n in nodes}["w-s0"] is NodeState.READY


def test_waiting_for_a_slice_another_up_is_creating_is_reported_once(sim, clock):
    first = Cluster.from_dict(SPEC, simulator=sim, clock=clock)
    desired = desired_slices(first.spec)
    for want in desired:  # an earlier `up` started the creates and died
        sim.create_node("zone-a", want.node_name, want.request)
    first.up()
    waiting = [e for e in first.events() if e.kind == "slice_waiting"]
    assert sorted(e.message for e in waiting) == ["waiting for w-s0 (CREATING)", "waiting for w-s1 (CREATING)"]
