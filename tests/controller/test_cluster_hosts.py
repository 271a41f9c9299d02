"""controller/cluster_hosts.py without a Ray cluster: `simulation.boot_hosts: false` boots
nothing, and the hosts' boot metadata needs a head."""

from __future__ import annotations

import pytest
from ray_fixtures import create_ready_nodes, mine, ray_like

from podmanager.controller.cluster_hosts import ClusterHosts
from podmanager.core.clock import FakeClock
from podmanager.core.errors import PodmanagerError
from podmanager.core.spec import parse_spec
from podmanager.emulator import vms
from podmanager.emulator.sim.cloud import SimCloud


class BootsSeen(vms.SimHostBooter):
    """The simulated VMs' booter, keeping what each node's boot started (machine ids)."""

    def __init__(self) -> None:
        super().__init__()
        self.started: dict[str, list[str]] = {}

    def boot(self, node):  # type: ignore[no-untyped-def]
        self.started[node.name] = super().boot(node)
        return self.started[node.name]


def test_boot_hosts_false_boots_nothing(home):
    spec = parse_spec(
        {"name": "noboot", "backend": "simulated", "slices": [{"accelerator": "v4-16"}],
         "simulation": {"boot_hosts": False}}
    )
    controller = ClusterHosts(spec, vms.SimulatedMachines())
    assert controller.node_metadata() == {}
    before = ray_like()
    clock = FakeClock()
    booter = BootsSeen()
    cloud = SimCloud(clock=clock, listeners=[booter])
    nodes = create_ready_nodes(cloud, clock, "noboot", ["v4-16"], controller.node_metadata())
    assert nodes[0].state.value == "READY"
    # The cloud tells its listeners before the call that turned the node READY returns: the
    # booter has handled that READY, and started no VM that could write a host record later.
    assert booter.started == {"noboot-s0": []}
    assert vms.host_records("noboot") == []
    assert {pid for pid in ray_like() - before if mine(pid, str(home))} == set()  # (the Ray lane's are not ours)
    assert controller.hosts() == []  # no head: nothing to report
    controller.stop_ray()  # idempotent, nothing to stop


def test_node_metadata_needs_a_head(home):
    spec = parse_spec({"name": "nohead", "backend": "simulated", "slices": [{"accelerator": "v4-8"}]})
    with pytest.raises(PodmanagerError):
        ClusterHosts(spec, vms.SimulatedMachines()).node_metadata()
