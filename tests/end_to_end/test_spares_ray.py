"""Hot spares on a dry-run cluster of real local Ray hosts at a 25 s create latency: a
preempted working slice is swapped for the ready spare and the run resumes within seconds
(well inside one create latency), while the cluster makes a new spare in the background."""

from __future__ import annotations

from pathlib import Path

import pytest
from ray_fixtures import module_cluster
from test_recovery import PreemptAt, train

from podmanager.core.clock import RealClock, poll_until

pytestmark = [pytest.mark.ray, pytest.mark.timeout(400)]
NAME = "sparetest"
CREATE_LATENCY_S = 25.0  # above the 15 s a swap may take: a recovery that waited for a create fails
SPEC = {
    "name": NAME,
    "backend": "simulated",
    "zones": ["sim-zone-a"],
    # `up` creates at 0 s; the test then sets the cluster's simulated create latency to 25 s,
    # as `simulation.create_latency_s: 25` does (the same call), saving the module its wait.
    "simulation": {"create_latency_s": 0.0, "delete_latency_s": 0.0},
    "health": {"interval_s": 0.5},
    "recovery": {"backoff_s": 0.0},
    "slices": [{"accelerator": "v5litepod-1", "count": 2, "spares": 1, "capacity": "spot"}],
}

home, cluster, _shared_home = module_cluster(SPEC)


def test_a_preempted_slice_is_swapped_for_the_spare_at_once_and_a_new_spare_is_made(cluster, tmp_path: Path):
    assert [(s.index, s.spare) for s in cluster.status().slices] == [(0, False), (1, False), (2, True)]
    cluster.simulator.configure_cluster(NAME, CREATE_LATENCY_S, 0.0)

    result = cluster.run(train(tmp_path / "spared"), printer=PreemptAt(cluster, 1, step=50))

    assert result.status == "succeeded", result.message
    assert (result.attempts, result.preemptions) == (2, 1)
    [incident] = result.incidents
    assert incident.slices == [1] and incident.swaps == [[1, 2]]
    assert incident.recover_s is not None and incident.recover_s <= 15.0, incident
    assert "create" not in incident.phases  # no create was waited for
    run = cluster.runs_store.get(result.run_id)
    assert run.slices == [0, 2]
    kinds = [e.kind for e in cluster.events()]
    assert "spare_swapped" in kinds and "slices_replaced" not in kinds

    # The lost slice is the spare now, made again in the background at the create latency.
    def new_spare_ready() -> bool:
        slices = {s.index: s for s in cluster.status().slices}
        made = any(e.kind == "spare_ready" and e.slice_index == 1 for e in cluster.events())
        return made and slices[1].spare and slices[1].state == "READY"

    poll_until(new_spare_ready, timeout_s=CREATE_LATENCY_S + 90.0, interval_s=1.0, clock=RealClock(),
               what="the new spare (slice 1) to be READY with its host joined")
