"""A timed fault on the simulated cloud happens at its announced time on its own: a
detached timer applies it with no podmanager process reading the cloud, exits after
firing, and `down` stops the timers still pending."""

from __future__ import annotations

import json
import time

import psutil
import pytest
from ray_fixtures import cluster_machines, wait_no_leftovers

from podmanager.api import Cluster, simulation
from podmanager.operations import sim_timers
from podmanager.operations.backends import simulated_cloud
from podmanager.core import paths
from podmanager.core.clock import FakeClock
from podmanager.hosts import procs

pytestmark = [pytest.mark.ray, pytest.mark.timeout(180)]
NO_HOSTS = {"boot_hosts": False, "create_latency_s": 0.01, "delete_latency_s": 0.01}


def raw_states(project: str = "podmanager-sim") -> dict[str, str]:
    """Node states straight from the simulator's file: reading them through SimCloud
    would advance the simulation and hide whether the timer did it."""
    state = json.loads(paths.sim_state_path(project).read_text())
    return {record["name"]: record["state"] for record in state["nodes"].values()}


def poll(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def spot_cluster(name: str, **extra) -> Cluster:
    return Cluster.from_dict({"name": name, "slices": [{"accelerator": "v4-8", "count": 2, "capacity": "spot"}],
                              "simulation": NO_HOSTS, **extra}, dry_run=True)


def test_preemption_after_notice_happens_with_nobody_reading_the_cloud():
    cluster = spot_cluster("timed")
    cluster.up()
    announced = time.time() + 1.0
    simulation.preempt(cluster.runtime, 1, notice_s=1.0)
    [timer] = sim_timers.pending("timed")
    assert raw_states() == {"timed-s0": "READY", "timed-s1": "READY"}  # notice given, not yet preempted

    assert poll(lambda: raw_states()["timed-s1"] == "PREEMPTED", timeout_s=10), raw_states()
    assert time.time() >= announced
    assert raw_states()["timed-s0"] == "READY"
    assert poll(lambda: not psutil.pid_exists(timer) or psutil.Process(timer).status() == psutil.STATUS_ZOMBIE, 5)
    assert sim_timers.pending("timed") == []
    cluster.down()


def test_scripted_fault_with_notice_fires_on_time_and_chains_its_timer():
    cluster = spot_cluster("scripted", **{"simulation": {**NO_HOSTS, "faults": [
        {"kind": "preempt", "slice": 0, "after_s": 0.5, "notice_s": 0.5}]}})
    cluster.up()
    assert poll(lambda: raw_states()["scripted-s0"] == "PREEMPTED", timeout_s=10), raw_states()
    cluster.down()


def test_down_stops_pending_timers():
    cluster = spot_cluster("stopped")
    cluster.up()
    simulation.preempt(cluster.runtime, 0, notice_s=120.0)
    [timer] = sim_timers.pending("stopped")
    cluster.down()
    assert sim_timers.pending("stopped") == []
    assert poll(lambda: not psutil.pid_exists(timer) or psutil.Process(timer).status() == psutil.STATUS_ZOMBIE, 5)


def test_a_manual_clock_starts_no_timer():
    cloud = simulated_cloud("podmanager-sim", clock=FakeClock())
    assert cloud.on_timed is None


# ---------------------------------------------------------------- with real simulated hosts

def test_preempted_hosts_vanish_at_the_announced_time_on_their_own():
    cluster = Cluster.from_dict({"name": "vanish", "slices": [{"accelerator": "v4-8", "capacity": "spot"}],
                                 "simulation": {"create_latency_s": 0.0, "delete_latency_s": 0.0}}, dry_run=True)
    machines: set[str] = set()
    try:
        cluster.up(timeout_s=120)
        cluster.close()  # this process holds no Ray connection and reads nothing from now on
        machines = cluster_machines("vanish")
        hosts = {m for m in machines if m != _head_machine("vanish")}
        assert hosts and all(procs.alive(m) for m in hosts)

        announced = time.time() + 2.0
        simulation.preempt(cluster.runtime, 0, notice_s=2.0)
        assert all(procs.alive(m) for m in hosts)  # the notice is not the preemption
        assert poll(lambda: not any(procs.alive(m) for m in hosts), timeout_s=2.0 + 8.0)
        assert time.time() >= announced
    finally:
        machines |= cluster_machines("vanish")
        cluster.down()
    assert wait_no_leftovers(machines, None) == []


def _head_machine(cluster: str) -> str | None:
    from podmanager.hosts import head

    state = head.load_state(cluster)
    return state.machine_id if state else None
