"""A dry run's cloud is the project's local emulator, reached through the real client: the
first command starts it, later ones find it, a dead one comes back from its saved state on
its old port, `down` of the project's last cluster stops it, and it alone moves simulated
time (a preemption after its notice happens with nobody reading the cloud). Reading a
cluster (`status`, `runs`) changes nothing in it, and `status` shows the monitor's view of the
slices while nothing happened since. The emulator outlives whoever started it, even a process
that kills its children on the way out. Control plane only: no Ray hosts."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import replace

import psutil
import pytest

from podmanager.api import Cluster, simulation
from podmanager.cloud.base import NodeState
from podmanager.cloud.gcp.client import GcpCloud
from podmanager.cluster import cloud_view
from podmanager.core import paths
from podmanager.core.cadence import SIMULATED
from podmanager.core.clock import poll_until
from podmanager.core.events import EventKind
from podmanager.emulator import launcher
from podmanager.emulator import record as emulator_record

pytestmark = pytest.mark.timeout(120)
NO_HOSTS = {"boot_hosts": False, "create_latency_s": 0.01, "delete_latency_s": 0.01}
PROJECT = "podmanager-sim"


def saved_states() -> dict[str, str]:
    """Node states as the emulator saved them: reading the file asks the emulator nothing, so
    whatever changed, its own ticker did."""
    try:
        state = json.loads(paths.sim_state_path(PROJECT).read_text())
    except (OSError, ValueError):  # not written yet
        return {}
    return {record["name"]: record["state"] for record in state["nodes"].values()}


def spot_cluster(name: str, **simulation_extra) -> Cluster:
    return Cluster.from_dict({"name": name, "slices": [{"accelerator": "v4-8", "count": 2, "capacity": "spot"}],
                              "simulation": {**NO_HOSTS, **simulation_extra}}, dry_run=True)


def test_a_dry_run_goes_through_the_real_client_to_one_emulator_per_project():
    first = spot_cluster("one")
    first.up()
    assert isinstance(first.cloud, GcpCloud)  # the code users run on Google Cloud
    emulator = launcher.running(PROJECT)
    assert emulator is not None and first.cloud.emulator_host == emulator.address
    second = spot_cluster("two")
    second.up()
    assert launcher.running(PROJECT) == emulator  # found again, not started twice
    first.down()
    assert launcher.running(PROJECT) == emulator  # cluster two still has nodes in it
    second.down()
    assert launcher.running(PROJECT) is None  # the project's last cluster went: so did it
    assert not psutil.pid_exists(emulator.pid) or psutil.Process(emulator.pid).status() == psutil.STATUS_ZOMBIE


def test_an_emulator_running_a_vm_is_not_idle_and_another_home_finds_it(tmp_path, monkeypatch):
    from podmanager.cloud.gcp.instances import ComputeInstances
    from podmanager.cloud.instances import Instance

    monkeypatch.setenv("PODMANAGER_SIM_HOME", str(tmp_path / "cloud"))
    started = launcher.ensure(PROJECT)
    monkeypatch.setenv("PODMANAGER_HOME", str(tmp_path / "controller-vm"))  # a VM's own home, the same cloud
    found = launcher.running(PROJECT)
    assert found is not None and found.address == started and launcher.ensure(PROJECT) == started
    with ComputeInstances(PROJECT, endpoint=found.compute_api, retry_deadline_s=5, retry_initial_s=0.05,
                          poll_interval_s=0.05) as instances:
        instances.create(Instance(name="vm", zone="sim-zone-a", machine_type="e2-standard-2"), timeout_s=30)
        assert not launcher.stop_if_idle(PROJECT)  # a VM, and no node: still in use
        instances.delete("sim-zone-a", "vm", timeout_s=30)
    poll_until(lambda: launcher.stop_if_idle(PROJECT), timeout_s=10, interval_s=0.1, what="the idle emulator stopped")
    assert launcher.running(PROJECT) is None


def test_a_killed_emulator_comes_back_from_its_saved_state_on_its_old_port():
    cluster = spot_cluster("phoenix")
    cluster.up()
    before = launcher.running(PROJECT)
    poll_until(lambda: saved_states() == {"phoenix-s0": "READY", "phoenix-s1": "READY"}, timeout_s=10,
               interval_s=0.05, what="the emulator to save its state")
    psutil.Process(before.pid).kill()
    psutil.Process(before.pid).wait(10)
    status = Cluster.from_name("phoenix").status()  # a later command restarts it
    assert [s.state for s in status.slices] == ["READY", "READY"]
    after = launcher.running(PROJECT)
    assert after.pid != before.pid and after.address == before.address
    # The old client's channel reconnects to the same address: the cluster object still works.
    simulation.preempt(cluster.runtime, 0)
    assert {n.name: n.state.value for n in cluster.simulator.all_nodes()}["phoenix-s0"] == "PREEMPTED"
    cluster.down()


def test_a_preemption_after_its_notice_happens_with_nobody_reading_the_cloud():
    cluster = spot_cluster("timed")
    cluster.up()
    announced = time.time() + 1.0
    simulation.preempt(cluster.runtime, 1, notice_s=1.0)
    states = {n.name: n.state.value for n in cluster.simulator.all_nodes()}
    assert states == {"timed-s0": "READY", "timed-s1": "READY"}  # notice given, not preempted yet
    poll_until(lambda: saved_states().get("timed-s1") == "PREEMPTED", timeout_s=10, interval_s=0.05,
               what="the preemption")
    assert time.time() >= announced and saved_states()["timed-s0"] == "READY"
    cluster.down()


def test_a_scripted_fault_is_handed_to_the_emulator_and_fires_on_time():
    cluster = spot_cluster("scripted", faults=[{"kind": "preempt", "slice": 0, "after_s": 0.5, "notice_s": 0.5}])
    started = time.time()
    cluster.up()
    poll_until(lambda: saved_states().get("scripted-s0") == "PREEMPTED", timeout_s=10, interval_s=0.05,
               what="the scripted preemption")
    assert time.time() - started >= 1.0 and saved_states()["scripted-s1"] == "READY"
    cluster.down()


def test_status_and_runs_change_nothing_in_the_simulated_cloud():
    cluster = spot_cluster("reader")
    cluster.up()
    control = cluster.simulator
    nodes, version, calls = control.all_nodes(), control.version(), len(control.requests())
    reader = Cluster.from_name("reader")
    reader.status()
    reader.runs()
    asked = [call["method"] for call in control.requests()[calls:]]
    assert asked and set(asked) <= {"ListNodes", "ListQueuedResources", "GetNode"}, asked  # reads only
    assert control.version() == version and control.all_nodes() == nodes
    cluster.down()


def test_status_shows_the_monitors_view_of_the_slices_until_podmanager_changes_the_cluster():
    """A cluster's monitor keeps the cloud's view of its slices (cluster/cloud_view.py):
    `status` shows a fresh one without asking the cloud, and asks the cloud when the view is
    older than the cluster's last event or than a few of the monitor's periods."""
    cluster = spot_cluster("viewer")
    cluster.up()
    control = cluster.simulator
    live = cloud_view.observe(cluster.runtime)
    seen = replace(live, observed_at=time.time(), nodes=[  # what a monitor saw a moment ago, not what is
        replace(n, state=NodeState.PREEMPTED) if n.slice_index == 1 else n for n in live.nodes])
    cloud_view.write("viewer", seen)
    calls = len(control.requests())
    shown = Cluster.from_name("viewer").status()
    assert [s.state for s in shown.slices] == ["READY", "PREEMPTED"] and shown.slices_observed_at == seen.observed_at
    assert control.requests()[calls:] == []  # the cloud was asked nothing

    cluster.store.add_event("viewer", EventKind.FAULT_INJECTED, "podmanager changed something")
    asked = Cluster.from_name("viewer").status()
    assert [s.state for s in asked.slices] == ["READY", "READY"] and asked.slices_observed_at > seen.observed_at
    cloud_view.write("viewer", replace(seen, observed_at=time.time() - 3.5 * SIMULATED.cloud_view_period_s))
    assert [s.state for s in Cluster.from_name("viewer").status().slices] == ["READY", "READY"]  # nobody kept it
    cluster.down()
    assert not cloud_view.path("viewer").exists()


def test_the_emulator_outlives_a_starter_that_kills_its_children_as_a_ray_worker_does():
    """A run's supervisor or a cluster's monitor (Ray workers) may be the one to start the
    project's emulator after it died, and Ray kills a worker's children when the worker exits:
    the emulator must be no one's child, or the next `down` finds no cloud."""
    starter = ("import psutil\nfrom podmanager.emulator import launcher\n"
               f"print(launcher.ensure({PROJECT!r}))\n"
               "for child in psutil.Process().children(recursive=True):\n    child.kill()\n")
    done = subprocess.run([sys.executable, "-c", starter], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    emulator = launcher.running(PROJECT)
    assert emulator is not None and emulator.address == done.stdout.strip()
    assert launcher.ensure(PROJECT) == emulator.address  # still serving: found, not started again
    assert launcher.stop(PROJECT)


def test_an_emulator_that_cannot_start_says_why(monkeypatch):
    monkeypatch.setattr(launcher, "MODULE", "podmanager.no_such_module")
    with pytest.raises(Exception, match="did not start") as failed:
        launcher.ensure("broken")
    assert str(emulator_record.log_path("broken")) in failed.value.hint


def test_a_spec_asking_another_network_mode_than_the_running_emulators_is_refused_naming_the_field(
        tmp_path, monkeypatch):
    from podmanager.cluster import backends
    from podmanager.core.errors import SpecError
    from podmanager.core.spec import parse_spec

    monkeypatch.setenv("PODMANAGER_SIM_HOME", str(tmp_path / "cloud"))
    monkeypatch.delenv("PODMANAGER_SIM_NETWORK", raising=False)

    def spec(network: str):
        return parse_spec({"name": "n", "slices": [{"accelerator": "v4-8"}], "simulation": {"network": network}},
                          dry_run=True)

    with pytest.raises(SpecError) as bad:
        spec("bridges")
    assert "simulation.network" in str(bad.value) and bad.value.exit_code == 2
    asked = spec("namespaces")
    started = launcher.ensure(PROJECT)  # the environment's mode: loopback
    try:
        with pytest.raises(SpecError) as refused:
            backends.make_instances(asked)
        assert refused.value.exit_code == 2 and refused.value.message.startswith("simulation.network: ")
        assert launcher.running(PROJECT).address == started  # refused, not changed under its clusters
        assert launcher.ensure(PROJECT, "loopback") == started
    finally:
        launcher.stop(PROJECT)
