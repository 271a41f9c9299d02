"""The emulator boots a node's VMs only while the node is READY: boots queue up behind each
other (a thousand slices turn READY faster than their VMs start), so a node that `down` (or
anything else) deleted meanwhile must not boot from its stale change, or `down` would race the
queue, as it did after an interrupted `up` of 1,200 slices."""

from __future__ import annotations

import queue

from podmanager.cloud.base import CLUSTER_LABEL, Node, NodeRequest, NodeState
from podmanager.controller.startup import STARTUP_SCRIPT_KEY
from podmanager.core.clock import FakeClock
from podmanager.core.spec import Capacity
from podmanager.emulator.server import Emulator

ZONE = "z"


class Recorder:
    """Stands for the simulated hosts: what it was asked to boot and to kill."""

    def __init__(self) -> None:
        self.booted: list[str] = []
        self.told: list[tuple[str, str]] = []

    def __call__(self, before: Node | None, after: Node | None) -> None:
        node = after or before
        assert node is not None
        self.told.append((node.name, after.state.value if after else "gone"))
        if after is not None and after.state is NodeState.READY:
            self.booted.append(after.name)


def drain(emulator: Emulator) -> None:
    while True:
        try:
            change = emulator._changes.get_nowait()
        except queue.Empty:
            return
        assert change is not None
        emulator.deliver(*change)


def test_a_node_deleted_before_its_boot_is_not_booted_and_its_vms_are_killed() -> None:
    clock = FakeClock()
    emulator = Emulator("p", persist=False, create_latency_s=1.0, delete_latency_s=5.0, clock=clock)
    hosts = emulator.booter = Recorder()  # type: ignore[assignment]
    request = NodeRequest("v4-8", "rt", Capacity.ON_DEMAND, labels={CLUSTER_LABEL: "big"},
                          metadata={STARTUP_SCRIPT_KEY: "#!/bin/bash\n"})
    for index in range(3):
        emulator.sim.create_node(ZONE, f"big-s{index}", request)
    clock.advance(1.0)
    emulator.sim.tick()  # all three READY: three boots queued, none delivered yet
    emulator.sim.delete_node(ZONE, "big-s0")  # `down` started before their turn came
    emulator.sim.delete_node(ZONE, "big-s1")
    drain(emulator)

    assert hosts.booted == ["big-s2"]
    assert ("big-s0", "DELETING") in hosts.told and ("big-s1", "DELETING") in hosts.told  # their VMs killed
    emulator.stop()
