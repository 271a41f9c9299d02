"""`up` of a dry-run cluster with real local Ray hosts, as two `podmanager up` of one spec
started at once: they take turns (the second says whom it waits for), one Ray head starts and
the second finds the work done; every wait is announced in order (head, slices, hosts joining
N/M); a slice under repair is waited out, not timed out. Then a script's
`with Cluster(..., down_on_exit=True)` whose run raises leaves nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
import psutil
from ray_fixtures import cluster_machines, ray_like, wait_no_leftovers

from podmanager.api import Cluster
from sim_view import sim_nodes
from podmanager.core.workload import Workload
from podmanager.state.runs import RunStore

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]
NAME = "twoups"
SPEC = {
    "name": NAME,
    "backend": "simulated",
    "zones": ["sim-zone-a"],
    "simulation": {"create_latency_s": 0.5, "delete_latency_s": 0.0},
    "head": {"join_timeout_s": 60},
    "slices": [{"accelerator": "v4-8", "count": 2}],
}


def left_behind(machines: set[str], before: set[int], home: Path) -> list[str]:
    """What is left of this module's cluster: its machines' processes, and Ray processes new
    since `before` that were started with this module's home (other clusters on this machine,
    other tests', are not ours to judge)."""
    ours = []
    for pid in ray_like() - before:
        try:
            if psutil.Process(pid).environ().get("PODMANAGER_HOME") == str(home):
                ours.append(pid)
        except psutil.Error:
            continue
    return wait_no_leftovers(machines, None) + [str(pid) for pid in ours]


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("pmhome")


@pytest.fixture(autouse=True)
def _module_home(home, podmanager_home, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PODMANAGER_HOME", str(home))


@pytest.fixture(scope="module")
def two_ups(home, tmp_path_factory):  # type: ignore[no-untyped-def]
    """Two `up`s of the spec started together; their (pid, exit code, stdout, stderr). The
    cluster is downed after the module, whatever happened, and nothing of it may be left."""
    spec = tmp_path_factory.mktemp("spec") / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    env = {**os.environ, "PODMANAGER_HOME": str(home)}
    before = ray_like()
    machines: set[str] = set()
    clients = [subprocess.Popen([sys.executable, "-m", "podmanager", "up", "-f", str(spec), "--dry-run"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    try:
        outcomes = [(client.pid, client.wait(timeout=240), *client.communicate()) for client in clients]
        machines = cluster_machines(NAME)
        yield outcomes
    finally:
        for client in clients:
            if client.poll() is None:
                client.kill()
                client.wait()
        machines |= cluster_machines(NAME)
        subprocess.run([sys.executable, "-m", "podmanager", "down", "-c", NAME], env=env, capture_output=True,
                       timeout=240)
        left = left_behind(machines, before, home)
        assert not left, f"processes left after down: {left}"


def test_two_ups_at_once_take_turns_and_start_one_head(two_ups):
    assert [code for _, code, _, _ in two_ups] == [0, 0], two_ups
    waited = [(pid, out) for pid, _, out, _ in two_ups if "waiting for another podmanager up" in out]
    assert len(waited) == 1, two_ups  # the first holds the lock for seconds: the second always finds it busy
    waiter, said = waited[0]
    first = next(pid for pid, _, _, _ in two_ups if pid != waiter)
    assert f"waiting for another podmanager up of {NAME} (pid {first})" in said
    assert "plan for twoups: keep slices 0-1 (v4-8, READY)" in said  # found the work done
    assert "slice_creating" not in said and "starting the Ray head" not in said
    everything = "".join(out for _, _, out, _ in two_ups)
    assert everything.count("starting the Ray head") == 1 and everything.count("Ray head is up") == 1
    assert sorted(n.name for n in sim_nodes("podmanager-sim")) == ["twoups-s0", "twoups-s1"]


def test_up_announces_each_wait_in_order(two_ups):
    cluster = Cluster.from_name(NAME)
    events = cluster.events()  # the first `up`'s, then the second's, which took its turn after it
    kinds = [e.kind for e in events]
    # The head comes up while the slices are made: it answers before the hosts are waited for.
    order = ["up", "head_starting", "slice_creating", "slice_ready", "slices_ready", "head_ready",
             "hosts_joining", "hosts_joined"]
    positions = [kinds.index(kind) for kind in order]
    assert positions == sorted(positions), kinds
    assert "starting the Ray head" in events[kinds.index("head_starting")].message
    first = kinds.index("hosts_joined")
    joining = [e.message for e in events[:first] if e.kind == "hosts_joining"]
    assert joining[0] == "waiting for 2 host(s) to join Ray (up to 60s)"
    assert joining[-1] == "2/2 host(s) joined Ray"  # counted up to all of them


def test_up_waits_for_a_repairing_slice_to_come_back(two_ups):
    cluster = Cluster.from_name(NAME)
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


def test_a_failing_script_in_a_down_on_exit_context_leaves_nothing(two_ups, home, tmp_path):
    (tmp_path / "loop.py").write_text("import time\nprint('looping', flush=True)\nwhile True:\n    time.sleep(0.2)\n")
    machines = cluster_machines(NAME)
    before = ray_like()

    def printer(host, text):  # type: ignore[no-untyped-def]
        raise ValueError("the script broke")

    with pytest.raises(ValueError, match="the script broke"):
        with Cluster.from_name(NAME, down_on_exit=True) as cluster:
            cluster.run(Workload(entrypoint="loop.py", working_dir=str(tmp_path), slices=[0]), printer=printer)
    [run] = RunStore().list(NAME)
    assert run.status == "cancelled"
    assert sim_nodes("podmanager-sim") == []
    assert left_behind(machines, before, home) == []  # the head, both hosts and their workers are stopped
