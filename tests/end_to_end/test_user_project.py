"""A user's project, from the user's folder: `podmanager run` started in a temporary folder
outside the repository (the cluster was brought up from elsewhere), with a program that
imports a package of that folder and a requirement that podmanager's environment lacks
(a wheel built here, served from a local folder: no network), and an unmodified
`jax.distributed.initialize()` program in command mode; on a v4-16 and on two v4-8 slices.
Also: a requirement that cannot be installed and a command that is not there are bad
input (exit 2, nothing run, no budget spent, no slice replaced); a preemption after the
setup sets up only the replacement slice's host; following one run shows none of another's
events."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cluster_specs import MULTISLICE
from ray_fixtures import module_cluster
from wheels import build_wheel

from podmanager.api import simulation
from podmanager.attempts.logs import RunFolder
from podmanager.core.clock import poll_until
from podmanager.state.run_records import RunStore

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]
SPEC = MULTISLICE  # shared with test_run.py: no recovery budget unless a run asks for one
NAME = SPEC["name"]
TOPOLOGIES = {"one v4-16": "0", "two v4-8": "1,2"}
PODMANAGER = str(Path(sys.executable).parent / "podmanager")

TRAIN = textwrap.dedent('''
    import json, os, time
    import tinydep                     # installed from requirements.txt
    from mypkg.model import describe   # a package of the user's folder
    from podmanager import runtime

    steps = int(os.environ.get("STEPS", "1"))
    first = 1 if os.environ["PODMANAGER_ATTEMPT"] == "0" else steps
    for step in range(first, steps + 1):
        runtime.report_progress(step)
        time.sleep(0.2)
    print("RESULT " + json.dumps({"dep": tinydep.ANSWER, "model": describe(), "cwd_has_data": os.path.exists("data"),
                                  "worker": os.environ["TPU_WORKER_ID"]}), flush=True)
''')
PLAIN = textwrap.dedent('''
    import json
    import jax
    import jax.numpy as jnp

    jax.distributed.initialize()  # nothing else: JAX finds its peers as on a TPU VM
    summed = jax.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")(jnp.ones(jax.local_device_count()))
    print("RESULT " + json.dumps({"process": jax.process_index(), "processes": jax.process_count(),
                                  "psum": float(summed[0])}), flush=True)
''')

home, cluster, _shared_home = module_cluster(SPEC)


@pytest.fixture
def project(tmp_path) -> Path:
    """The user's folder: a program, a package of its own, requirements, a big ignored folder."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    build_wheel(wheels, "tinydep", "1.0", "ANSWER = 'tiny'\n")
    folder = tmp_path / "my-project"
    (folder / "mypkg").mkdir(parents=True)
    (folder / "mypkg" / "__init__.py").write_text("")
    (folder / "mypkg" / "model.py").write_text("def describe():\n    return 'mlp from my folder'\n")
    (folder / "train.py").write_text(TRAIN)
    (folder / "plain.py").write_text(PLAIN)
    (folder / "requirements.txt").write_text(f"--no-index\n--find-links {wheels}\ntinydep==1.0  # tiny\n")
    (folder / "data").mkdir()
    (folder / "data" / "big.bin").write_bytes(b"\0" * 1024)
    (folder / ".gitignore").write_text("data/\n")
    return folder


def podmanager(folder: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """The CLI as a user runs it: in their own folder."""
    assert not str(folder.resolve()).startswith(str(Path(__file__).resolve().parents[2]))
    return subprocess.run([PODMANAGER, *args], cwd=folder, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PODMANAGER_HOME": os.environ["PODMANAGER_HOME"]})


def results(cluster, run_id: str) -> list[dict]:
    found = []
    for log in sorted(RunFolder(cluster.name, run_id).folder.glob("slice-*-host-*.log")):
        found += [json.loads(line[len("RESULT "):]) for line in log.read_text().splitlines()
                  if line.startswith("RESULT ")]
    return found


@pytest.mark.parametrize("slices", TOPOLOGIES.values(), ids=TOPOLOGIES.keys())
def test_a_program_imports_its_folders_package_and_its_requirements_on_every_host(cluster, project, slices):
    done = podmanager(project, "run", "-c", NAME, "--slices", slices, "--requirements", "requirements.txt",
                      "--json", "train.py")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    seen = results(cluster, result["run_id"])
    assert len(seen) == 2  # both hosts, whichever the topology
    assert {(r["dep"], r["model"], r["cwd_has_data"]) for r in seen} == {("tiny", "mlp from my folder", False)}
    assert result["badput"]["setup"] > 0


@pytest.mark.parametrize("slices", TOPOLOGIES.values(), ids=TOPOLOGIES.keys())
def test_an_unmodified_jax_program_runs_as_a_command_from_the_users_folder(cluster, project, slices):
    done = podmanager(project, "run", "-c", NAME, "--slices", slices, "--json", "--", "python", "plain.py")
    assert done.returncode == 0, done.stdout + done.stderr
    seen = sorted(results(cluster, json.loads(done.stdout)["run_id"]), key=lambda r: r["process"])
    assert [(r["process"], r["processes"], r["psum"]) for r in seen] == [(0, 2, 8.0), (1, 2, 8.0)]


def test_a_requirement_that_cannot_be_installed_is_bad_input(cluster, project):
    (project / "requirements.txt").write_text((project / "requirements.txt").read_text() + "tinydepx==9.9\n")
    events_before = cluster.store.events(NAME)[-1].id
    done = podmanager(project, "run", "-c", NAME, "--slices", "1", "--requirements", "requirements.txt", "train.py")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "tinydepx" in done.stdout and "slice-1/host-0" in done.stdout  # uv's own words, and where
    [run] = [r for r in RunStore().list(NAME) if r.result and r.result.setup_error]
    assert run.status == "failed" and (run.result.failures, run.result.incidents) == (0, [])
    kinds = [e.kind for e in cluster.store.events(NAME, after_id=events_before)]
    assert "slices_deleted" not in kinds and "incident" not in kinds
    assert not list(RunFolder(cluster.name, run.run_id).folder.glob("slice-*-host-*.log"))  # no program started


def test_a_command_that_is_not_on_the_hosts_is_refused_before_it_starts(cluster, project):
    done = podmanager(project, "run", "-c", NAME, "--slices", "2", "--", "pythn", "plain.py")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "'pythn' is not on the host's PATH" in done.stdout


def test_a_typo_in_an_option_starts_nothing(cluster, project):
    runs_before = len(RunStore().list(NAME))
    done = podmanager(project, "run", "-c", NAME, "--requirments", "requirements.txt", "train.py")
    assert done.returncode == 2 and "--requirments" in done.stderr + done.stdout
    assert len(RunStore().list(NAME)) == runs_before


def test_after_a_preemption_only_the_replacement_host_sets_up_again(cluster, project):
    submitted = podmanager(project, "run", "-c", NAME, "--slices", "1,2", "--requirements", "requirements.txt",
                           "--env", "STEPS=400", "--max-preemptions", "1", "--detach", "--json", "train.py")
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    run_id = json.loads(submitted.stdout)["run_id"]
    runs = RunStore()
    poll_until(lambda: (runs.get(run_id).progress.step or 0) >= 3, timeout_s=120, interval_s=0.2,
               what="the run's third step")
    simulation.preempt(cluster.runtime, 2)
    result = cluster.run_handle(run_id).wait(timeout_s=240)
    assert result.status == "succeeded" and result.preemptions == 1, result.message
    setups = [e.data for e in cluster.store.events(NAME, kind="setup_done") if e.run_id == run_id]
    assert [s.installed for s in setups] == [["slice-1/host-0", "slice-2/host-0"], ["slice-2/host-0"]]


def test_attaching_to_one_run_shows_none_of_anothers_events(cluster, project):
    ids = []
    for slice_index in ("1", "2"):
        done = podmanager(project, "run", "-c", NAME, "--slices", slice_index, "--detach", "--json",
                          "--", "python", "-c", "print('hello')")
        assert done.returncode == 0, done.stdout + done.stderr
        ids.append(json.loads(done.stdout)["run_id"])
    first, second = ids
    attached = podmanager(project, "attach", "-c", NAME, first)
    assert attached.returncode == 0, attached.stdout + attached.stderr
    assert first in attached.stdout and second not in attached.stdout + attached.stderr


def test_links_leaving_the_project_are_not_shipped_and_a_link_to_its_parent_does_not_hang_the_run(
        cluster, project, tmp_path):
    """`up -> ..` once made a local run walk the parent again and again, in `starting` with its
    slice until killed; a file link to outside shipped the file it pointed to."""
    (tmp_path / "outside.txt").write_text("not the project's\n")
    (project / "up").symlink_to("..")
    (project / "outside.txt").symlink_to(tmp_path / "outside.txt")
    (project / "look.py").write_text(textwrap.dedent('''
        import json, os
        print("RESULT " + json.dumps({name: os.path.exists(name) for name in ("up", "outside.txt", "mypkg/model.py")}),
              flush=True)
    '''))
    done = podmanager(project, "run", "-c", NAME, "--slices", "1", "--json", "look.py", timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    for link in ("up", "outside.txt"):
        assert f"{project}/{link} is a link that is not shipped: it leads outside the folder" in done.stderr
    assert results(cluster, json.loads(done.stdout)["run_id"]) == [
        {"up": False, "outside.txt": False, "mypkg/model.py": True}]


def test_a_working_dir_too_large_unpacked_is_refused_before_anything_is_sent(cluster, project):
    """A file of zeros zips to almost nothing, yet every host would unpack all of it."""
    with open(project / "zeros.bin", "wb") as sparse:
        sparse.truncate(300 << 20)  # 300 MiB that take no disk here
    runs_before = len(RunStore().list(NAME))
    done = podmanager(project, "run", "-c", NAME, "--slices", "1", "train.py", timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    said = done.stdout + done.stderr
    assert "more than the 256 MiB unpacked on every host; the biggest: zeros.bin (300 MiB)" in said
    assert ".gitignore" in said
    assert len(RunStore().list(NAME)) == runs_before
