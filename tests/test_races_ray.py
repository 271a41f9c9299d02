"""Races and edits on a dry-run cluster of real local Ray hosts, through the CLI where a user
meets them: `run --detach` three times at once on one slice, a submit refused after its
claim, `up` of a spec that drops a slice a run uses, and an exception escaping `Cluster.run`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ray_fixtures import module_cluster
from typer.testing import CliRunner

from sim_view import sim_nodes
from podmanager.cli import app
from podmanager.core.clock import poll_until
from podmanager.core.workload import Workload
from podmanager.state.runs import RunStore

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]
NAME = "races"
SPEC = {
    "name": NAME,
    "backend": "simulated",
    "zones": ["sim-zone-a"],
    "simulation": {"create_latency_s": 0.0, "delete_latency_s": 0.0},
    "health": {"interval_s": 0.5},
    "recovery": {"max_failures": 0, "max_hangs": 0, "max_preemptions": 0},
    "slices": [{"accelerator": "v4-8", "count": 2}],
}
LOOP = "import time\nprint('looping', flush=True)\nwhile True:\n    time.sleep(0.2)\n"

home, cluster, _shared_home = module_cluster(SPEC)
runner = CliRunner()


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
    for _ in range(3):  # each try is seconds of real processes; the 20-try race is in test_run_claims.py
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


def test_up_that_drops_a_slice_of_a_run_refuses_and_with_force_cancels_the_run_first(cluster, project, tmp_path):
    handle = cluster.submit(Workload(entrypoint="loop.py", working_dir=str(project)))  # on slices 0 and 1
    poll_until(lambda: RunStore().get(handle.run_id).phase.name == "running", timeout_s=120, interval_s=0.2,
               what="the run to start")
    try:
        refused = invoke("up", "-f", str(spec_file(tmp_path, 1)), "--dry-run")
        assert refused.exit_code == 2, refused.output
        assert f"run {handle.run_id} (running) runs on slice 1 (races-s1), which the spec deletes: not in the spec" \
            in refused.stderr
        assert "--force" in refused.stderr
        assert nodes() == ["races-s0", "races-s1"] and handle.status().status == "running"

        forced = invoke("up", "-f", str(spec_file(tmp_path, 1)), "--dry-run", "--force")
        assert forced.exit_code == 0, forced.output
        said = forced.stdout
        assert said.index(f"cancelling run {handle.run_id}: 'up --force' takes slice(s) [1]") \
            < said.index("plan for races: delete slice 1 (v4-8, not in the spec); keep slice 0 (v4-8, READY)") \
            < said.index("slice_deleting")
        assert handle.status().status == "cancelled"  # stopped on its hosts, not taken for a preemption
        assert nodes() == ["races-s0"]
        assert [e.kind for e in cluster.events() if e.data.get("run_id") == handle.run_id].count("incident") == 0
    finally:  # the module's cluster as it was, for the other tests
        restored = invoke("up", "-f", str(spec_file(tmp_path, 2)), "--dry-run")
    assert restored.exit_code == 0, restored.output
    assert nodes() == ["races-s0", "races-s1"]


def test_an_exception_escaping_run_cancels_the_run(cluster, project):
    def printer(host, text):  # type: ignore[no-untyped-def]
        raise ValueError("the terminal went away")

    with pytest.raises(ValueError, match="the terminal went away"):
        cluster.run(Workload(entrypoint="loop.py", working_dir=str(project), slices=[0]), printer=printer)
    run = cluster.runs()[-1]
    assert run.status == "cancelled" and active_runs() == []
    assert nodes() == ["races-s0", "races-s1"]  # without down_on_exit the cluster stays
