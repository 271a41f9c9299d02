"""`up` of a dry-run cluster with real local Ray hosts: every wait is announced in order
(head, slices, hosts joining N/M), and a slice under repair is waited out, not timed out."""

from __future__ import annotations

import time

import pytest
from ray_fixtures import module_cluster

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]
NAME = "progresstest"
SPEC = {
    "name": NAME,
    "backend": "simulated",
    "simulation": {"create_latency_s": 0.5, "delete_latency_s": 0.0},
    "head": {"join_timeout_s": 60},
    "slices": [{"accelerator": "v4-8", "count": 2}],
}


home, cluster, _shared_home = module_cluster(SPEC)


def test_up_announces_each_wait_in_order(cluster):
    events = cluster.events()
    kinds = [e.kind for e in events]
    # The head comes up while the slices are made: it answers before the hosts are waited for.
    order = ["up", "head_starting", "slice_creating", "slice_ready", "slices_ready", "head_ready",
             "hosts_joining", "hosts_joined"]
    positions = [kinds.index(kind) for kind in order]
    assert positions == sorted(positions), kinds
    assert "starting the Ray head" in events[kinds.index("head_starting")].message
    joining = [e.message for e in events if e.kind == "hosts_joining"]
    assert joining[0] == "waiting for 2 host(s) to join Ray (up to 60s)"
    assert joining[-1] == "2/2 host(s) joined Ray"  # counted up to all of them


def test_up_waits_for_a_repairing_slice_to_come_back(cluster):
    sim = cluster.simulator
    node = next(n for n in sim.all_nodes() if n.slice_index == 0)
    sim.repair(node.zone, node.name, duration_s=3.0)
    after = cluster.events()[-1].id
    started = time.monotonic()

    status = cluster.up(timeout_s=60)
    took = time.monotonic() - started
    assert [s.state for s in status.slices] == ["READY", "READY"]
    assert took < 30, f"up took {took:.0f}s: it waited for the join timeout, not the repair"
    kinds = [e.kind for e in cluster.events(after_id=after)]
    assert kinds.index("head_starting") < kinds.index("slice_repairing") < kinds.index("slice_repaired")
    assert kinds.index("slice_repaired") < kinds.index("hosts_joined")
    reused = [e.message for e in cluster.events(after_id=after) if e.kind == "head_starting"]
    assert reused and reused[0].startswith("using the Ray head at ")
