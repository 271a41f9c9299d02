"""`up` crashes after its hosts joined: a new process still finds the agents, and
`stop` from that new process leaves no Ray process behind."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from ray_fixtures import cluster_machines, ray_like, wait_no_leftovers

from podmanager.controller import head
from podmanager.controller.cluster_hosts import ClusterHosts
from podmanager.core.spec import parse_spec
from podmanager.emulator import vms

pytestmark = [pytest.mark.ray, pytest.mark.timeout(180)]

SPEC = {"name": "crashed", "backend": "simulated", "slices": [{"accelerator": "v4-8"}]}

CRASHING_UP = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, {tests!r})
    from podmanager.core.clock import FakeClock
    from podmanager.controller.cluster_hosts import ClusterHosts
    from podmanager.emulator import vms
    from podmanager.core.spec import parse_spec
    from ray_fixtures import booting_emulator, create_ready_nodes

    spec = parse_spec({spec!r})
    controller = ClusterHosts(spec, vms.SimulatedMachines())
    clock = FakeClock()
    with booting_emulator(spec, clock) as (emulator, metadata):
        nodes = create_ready_nodes(emulator.sim, clock, spec.name, ["v4-8"], metadata)
        controller.wait_for_hosts(nodes, timeout_s=120)
        print("UP", flush=True)
        os._exit(9)  # crash: no stop(), no ray.shutdown()
    """
)


def test_stop_after_a_crashed_up_leaves_nothing(podmanager_home):
    before = ray_like()
    script = CRASHING_UP.format(tests=str(Path(__file__).parents[1] / "support"), spec=SPEC)
    machines: set[str] = set()
    controller = ClusterHosts(parse_spec(SPEC), vms.SimulatedMachines())
    try:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=150,
                              env={**os.environ, "PODMANAGER_HOME": str(podmanager_home)})
        assert "UP" in done.stdout, done.stderr[-3000:]
        assert done.returncode == 9
        machines = cluster_machines("crashed")
        assert len(machines) == 2  # the head and one host, still running
        assert controller.head_address() == head.load_state("crashed").address
        infos = controller.hosts()  # a new process finds the detached, named agent
        assert [(h.slice_index, h.worker_id, h.healthy, h.chips) for h in infos] == [(0, 0, True, 4)]
    finally:
        controller.stop_ray()
        left = wait_no_leftovers(machines, before, home=os.environ["PODMANAGER_HOME"])
    assert not left, f"Ray processes left after stop(): {left}"
    assert vms.host_records("crashed") == [] and head.load_state("crashed") is None
    controller.stop_ray()  # idempotent
