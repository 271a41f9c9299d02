"""`up` of a dry-run cluster with real local Ray hosts, as two `podmanager up` of one spec
started at once: they take turns (the second says whom it waits for), one Ray head starts and
the second finds the work done; every wait is announced in order (head, slices, hosts joining
N/M); a slice under repair is waited out, not timed out; `status` then reads the monitor's view of
the slices, loading neither Google's client nor Ray. On that cluster, the races and edits a
user meets through the CLI: `run --detach` three times at once on one slice, a submit refused
after its claim, an exception escaping `Cluster.run`, `up` of a spec that drops a slice a run
uses. Last, a script's `with Cluster(..., down_on_exit=True)` whose run raises leaves nothing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
import yaml
from homes import home_env, use_home
from ray_fixtures import cluster_machines, ray_like, wait_no_leftovers
from sim_view import sim_nodes
from typer.testing import CliRunner

from podmanager.api import Cluster
from podmanager.cli import app
from podmanager.cluster import cloud_view
from podmanager.controller.software import content_version
from podmanager.core.clock import poll_until
from podmanager.core.workload import Workload
from podmanager.emulator.vms import record_path
from podmanager.state.run_records import RunStore

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]
NAME = "twoups"
SPEC = {
    "name": NAME,
    "backend": "simulated",
    "zones": ["sim-zone-a"],
    "simulation": {"create_latency_s": 0.5, "delete_latency_s": 0.0},
    "head": {"join_timeout_s": 60},
    "health": {"interval_s": 0.5},
    "recovery": {"max_failures": 0, "max_hangs": 0, "max_preemptions": 0},
    "slices": [{"accelerator": "v4-8", "count": 2}],
}
LOOP = "import time\nprint('looping', flush=True)\nwhile True:\n    time.sleep(0.2)\n"
runner = CliRunner()


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
    use_home(monkeypatch, home)


@pytest.fixture(scope="module")
def two_ups(home, tmp_path_factory):  # type: ignore[no-untyped-def]
    """Two `up`s of the spec started together; their (pid, exit code, stdout, stderr). The
    cluster is downed after the module, whatever happened, and nothing of it may be left."""
    spec = tmp_path_factory.mktemp("spec") / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    env = {**os.environ, **home_env(home)}
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


def test_status_shows_the_monitors_view_and_loads_neither_googles_client_nor_ray(two_ups):
    """The cluster's monitor keeps the cloud's view of the slices: a `status` a moment after
    the last change shows every host joined from that view, without the cloud's client or Ray."""
    last = Cluster.from_name(NAME).store.last_event_time(NAME)
    poll_until(lambda: cloud_view.read_fresh(NAME, simulated=True, newer_than=last), timeout_s=10, interval_s=0.1,
               what="the monitor's view of the slices after the last event")
    script = ("import json, sys\nfrom podmanager.api import Cluster\n"
              "status = Cluster.from_name(sys.argv[1]).status()\n"
              "loaded = sorted(m for m in sys.modules if m.startswith(('google.cloud.tpu', 'ray.')) or m == 'ray')\n"
              "print(json.dumps({'slices': [[s.state, s.boot] for s in status.slices], 'hosts': len(status.hosts),"
              " 'at': status.slices_observed_at, 'loaded': loaded}))")
    done = subprocess.run([sys.executable, "-c", script, NAME], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["slices"] == [["READY", ["joined"]]] * 2 and shown["hosts"] == 2
    assert shown["loaded"] == [] and shown["at"] > last


def test_hosts_running_another_podmanager_than_the_controllers_are_planned_for_replacement(two_ups):
    """Each host reports the versions it installed (the guest attribute `versions`): as booted,
    exactly what a boot would install now; one reporting another podmanager (as after an upgrade
    of the controller's) makes `up` plan its slice's replacement, showing both versions."""
    cluster = Cluster.from_name(NAME)
    assert [c.kind for c in cluster.plan_up().changes] == ["keep", "keep"]
    port = json.loads(record_path(NAME, f"{NAME}-s1", 0).read_text())["metadata_port"]
    url = f"http://127.0.0.1:{port}/computeMetadata/v1/instance/guest-attributes/podmanager/versions"

    def attribute(value: str | None = None) -> str:
        request = urllib.request.Request(url, data=None if value is None else value.encode(),
                                         method="GET" if value is None else "PUT",
                                         headers={"Metadata-Flavor": "Google"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.read().decode()

    reported = attribute()
    assert f"podmanager={content_version()}" in reported
    attribute(re.sub(r"podmanager=\S+", "podmanager=0.0.1+hold", reported))
    try:
        planned = cluster.plan_up().changes
        assert [(c.kind, c.slice_index) for c in planned] == [("keep", 0), ("replace", 1)]
        assert f"software changed: worker 0 runs podmanager 0.0.1+hold -> {content_version()}" in planned[1].reason
    finally:
        attribute(reported)
    assert [c.kind for c in cluster.plan_up().changes] == ["keep", "keep"]


@pytest.fixture
def cluster(two_ups) -> Cluster:
    """The two `up`s' cluster, as a script holds it."""
    return Cluster.from_name(NAME)


@pytest.fixture
def project(tmp_path) -> Path:
    """The user's folder: a program that runs until stopped, and one .gitignore leaves out."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "loop.py").write_text(LOOP)
    (folder / "secret.py").write_text(LOOP)
    (folder / ".gitignore").write_text("secret.py\n")
    return folder


def cli(*args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "podmanager", *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ))


def invoke(*args: str):  # type: ignore[no-untyped-def]
    return runner.invoke(app, list(args), prog_name="podmanager")


def spec_file(folder: Path, count: int) -> Path:
    path = folder / f"spec-{count}.yaml"
    path.write_text(yaml.safe_dump({**SPEC, "slices": [{"accelerator": "v4-8", "count": count}]}))
    return path


def active_runs() -> list[str]:
    return [r.run_id for r in RunStore().active(NAME)]


def nodes() -> list[str]:
    return sorted(n.name for n in sim_nodes("podmanager-sim"))


def test_three_detached_runs_on_one_slice_at_once_start_exactly_one(cluster, project):
    # A project with some data, as most have: packing and uploading it takes a moment, which
    # a busy check made before the upload and a claim written after it would let all three through.
    (project / "data.bin").write_bytes(os.urandom(16 << 20))
    for _ in range(3):  # each try is seconds of real processes; the 20-try race is in tests/state/test_run_records.py
        clients = [cli("run", "-c", NAME, "--slices", "0", "--detach", "loop.py", cwd=project) for _ in range(3)]
        outcomes = [(client.wait(timeout=120), *client.communicate()) for client in clients]
        accepted = [out for code, out, _ in outcomes if code == 0]
        assert len(accepted) == 1, outcomes
        run_id = accepted[0].split()[2]  # "submitted run RUN ..."
        refused = [(code, err) for code, out, err in outcomes if code != 0]
        assert [code for code, _ in refused] == [2, 2], outcomes
        assert all(f"slice(s) [0] are busy with run {run_id}" in err for _, err in refused), refused
        assert active_runs() == [run_id]
        assert cluster.run_handle(run_id).cancel().status == "cancelled"


def test_a_program_refused_after_the_claim_spends_nothing_and_the_slice_stays_free(cluster, project, monkeypatch):
    monkeypatch.chdir(project)
    refused = invoke("run", "-c", NAME, "--slices", "1", "--detach", "secret.py")
    assert refused.exit_code == 2, refused.output
    assert "secret.py is left out of what is shipped to the hosts" in refused.stderr
    assert active_runs() == []

    accepted = invoke("run", "-c", NAME, "--slices", "1", "--detach", "loop.py")
    assert accepted.exit_code == 0, accepted.output
    run_id = accepted.stdout.split()[2]
    assert active_runs() == [run_id]
    assert cluster.run_handle(run_id).cancel().status == "cancelled"


def test_an_exception_escaping_run_cancels_the_run(cluster, project):
    def printer(host, text):  # type: ignore[no-untyped-def]
        raise ValueError("the terminal went away")

    with pytest.raises(ValueError, match="the terminal went away"):
        cluster.run(Workload(entrypoint="loop.py", working_dir=str(project), slices=[0]), printer=printer)
    run = cluster.runs()[-1]
    assert run.status == "cancelled" and active_runs() == []
    assert nodes() == ["twoups-s0", "twoups-s1"]  # without down_on_exit the cluster stays


def test_up_that_drops_a_slice_of_a_run_refuses_and_with_force_cancels_the_run_first(cluster, project, tmp_path):
    handle = cluster.submit(Workload(entrypoint="loop.py", working_dir=str(project)))  # on slices 0 and 1
    poll_until(lambda: RunStore().get(handle.run_id).phase.name == "running", timeout_s=120, interval_s=0.2,
               what="the run to start")
    refused = invoke("up", "-f", str(spec_file(tmp_path, 1)), "--dry-run")
    assert refused.exit_code == 2, refused.output
    assert f"run {handle.run_id} (running) runs on slice 1 (twoups-s1), which the spec deletes: not in the spec" \
        in refused.stderr
    assert "--force" in refused.stderr
    assert nodes() == ["twoups-s0", "twoups-s1"] and handle.status().status == "running"

    forced = invoke("up", "-f", str(spec_file(tmp_path, 1)), "--dry-run", "--force")
    assert forced.exit_code == 0, forced.output
    said = forced.stdout
    assert said.index(f"cancelling run {handle.run_id}: 'up --force' takes slice(s) [1]") \
        < said.index("plan for twoups: delete slice 1 (v4-8, not in the spec); keep slice 0 (v4-8, READY)") \
        < said.index("slice_deleting")
    assert handle.status().status == "cancelled"  # stopped on its hosts, not taken for a preemption
    assert nodes() == ["twoups-s0"]
    assert [e.kind for e in cluster.events() if e.run_id == handle.run_id].count("incident") == 0


def test_a_failing_script_in_a_down_on_exit_context_leaves_nothing(two_ups, home, tmp_path):
    (tmp_path / "loop.py").write_text("import time\nprint('looping', flush=True)\nwhile True:\n    time.sleep(0.2)\n")
    machines = cluster_machines(NAME)
    before = ray_like()
    earlier = {run.run_id for run in RunStore().list(NAME)}

    def printer(host, text):  # type: ignore[no-untyped-def]
        raise ValueError("the script broke")

    with pytest.raises(ValueError, match="the script broke"):
        with Cluster.from_name(NAME, down_on_exit=True) as cluster:
            cluster.run(Workload(entrypoint="loop.py", working_dir=str(tmp_path), slices=[0]), printer=printer)
    [run] = [run for run in RunStore().list(NAME) if run.run_id not in earlier]
    assert run.status == "cancelled"
    assert sim_nodes("podmanager-sim") == []
    assert left_behind(machines, before, home) == []  # the head, both hosts and their workers are stopped
