"""`up` follows each host's boot through its guest attributes: every change is an event, and a
host's error ends the wait at once, naming the host and the error."""

from __future__ import annotations

import pytest

from podmanager.cloud.base import NodeRequest
from podmanager.cluster.boot_watch import BootWatch, boot_statuses
from podmanager.core.clock import FakeClock
from podmanager.core.errors import PodmanagerError
from podmanager.core.spec import Capacity
from podmanager.emulator.sim.cloud import SimCloud
from podmanager.vm.boot_status import BootStatus


@pytest.fixture
def cloud():
    clock = FakeClock()
    sim = SimCloud(clock=clock, create_latency_s=0.0)
    sim.create_node("z", "c-s0", NodeRequest("v4-16", "rt", Capacity.ON_DEMAND, labels={
        "podmanager-cluster": "c", "podmanager-slice": "0"}))
    return sim, clock


def watch(sim: SimCloud, clock: FakeClock) -> tuple[BootWatch, list[tuple[str, str]]]:
    events: list[tuple[str, str]] = []
    node = sim.get_node("z", "c-s0")
    return BootWatch(sim, [node], lambda kind, message, **data: events.append((kind, message)), clock,
                     simulated=True), events


def test_each_stage_is_recorded_once_per_host(cloud) -> None:
    sim, clock = cloud
    check, events = watch(sim, clock)
    sim.set_guest_attribute("z", "c-s0", 0, "podmanager/boot", "installing")
    check()
    sim.set_guest_attribute("z", "c-s0", 1, "podmanager/boot", "joining")
    check()  # within the interval: no call
    clock.advance(1.0)
    check()
    clock.advance(1.0)
    check()  # nothing new
    assert events == [("host_boot", "slice 0 worker 0 (c-s0): installing"),
                      ("host_boot", "slice 0 worker 1 (c-s0): joining")]


def test_a_hosts_error_ends_the_wait_naming_the_host_and_the_error(cloud) -> None:
    sim, clock = cloud
    check, events = watch(sim, clock)
    sim.set_guest_attribute("z", "c-s0", 1, "podmanager/boot", "error")
    sim.set_guest_attribute("z", "c-s0", 1, "podmanager/boot-detail", "install failed\nNo solution found: ray==1")
    with pytest.raises(PodmanagerError, match=r"slice 0 worker 1 \(c-s0\) failed to boot: install failed\n"
                                              r"No solution found: ray==1"):
        check()
    assert events[-1][0] == "host_boot_failed"


def test_versions_are_read_per_worker(cloud) -> None:
    sim, _ = cloud
    sim.set_guest_attribute("z", "c-s0", 0, "podmanager/versions", "python=3.11.7 ray=2.60.0 jax=0.10.2 podmanager=1")
    sim.set_guest_attribute("z", "c-s0", 0, "podmanager/boot", "joined")
    statuses = boot_statuses(sim, sim.get_node("z", "c-s0"))
    assert statuses == {0: BootStatus("joined", "", "python=3.11.7 ray=2.60.0 jax=0.10.2 podmanager=1")}
    assert statuses[0].versions_dict() == {"python": "3.11.7", "ray": "2.60.0", "jax": "0.10.2", "podmanager": "1"}
