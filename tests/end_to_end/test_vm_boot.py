"""A simulated TPU VM boots the way a real one does, driven as a user drives podmanager: the CLI
from a temporary folder outside the repository.

- A boot error (a podmanager wheel that does not exist; a token the VM may not read) fails `up`
  when the host reports it, not at `up`'s deadline for the join, naming the host and the
  script's error (under a minute on a quiet machine: the figure is benchmarks/vm_boot.py's); `up` again with the spec fixed makes
  the slice again.
- A host's processes run from its own root folder, started by the node's startup script
  (fetched from its own metadata server and run with bash); its token comes from Secret
  Manager into that root; `status --json` shows `boot: joined` and the controller's versions.
- `sim head-crash`, then `up`: the head starts anew, the nodes' metadata names it, the host
  rejoins, no slice is created again, and a run afterwards succeeds; `down` leaves nothing.
- A bare VM installs everything with uv, from the emulator's package index stand-in, and runs a program.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml
from sim_view import sim_nodes

from podmanager.controller.software import controller_versions
from podmanager.emulator import package_index, vms
from podmanager.vm import procs

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]
PODMANAGER = str(Path(sys.executable).parent / "podmanager")


def spec(folder: Path, name: str, **extra: object) -> Path:
    body = {"name": name, "backend": "simulated",
            "simulation": {"create_latency_s": 0.0, "delete_latency_s": 0.0},
            "slices": [{"accelerator": "v4-8"}], **extra}
    path = folder / "cluster.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def cli(folder: Path, *args: str, check: bool = True, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([PODMANAGER, *args], cwd=folder, text=True, capture_output=True, timeout=timeout)
    if check:
        assert done.returncode == 0, f"podmanager {' '.join(args)}: exit {done.returncode}\n{done.stderr[-3000:]}"
    return done


# 60 steps of a quarter second, resuming from the step its checkpoint file holds.
STEPS = """
import os, pathlib, time
from podmanager import runtime
mark = pathlib.Path(os.environ["PODMANAGER_CHECKPOINT_DIR"]) / "step"
start = int(mark.read_text()) if mark.exists() else 0
for step in range(start + 1, 61):
    time.sleep(0.25)
    mark.parent.mkdir(parents=True, exist_ok=True)
    # Written aside and renamed, as a checkpoint is: a kill mid-write leaves the last step.
    (mark.parent / "step.tmp").write_text(str(step))
    os.replace(mark.parent / "step.tmp", mark)
    runtime.report_progress(step, loss=1.0 / step)
"""


def wait_for_step(folder: Path, run_id: str, step: int, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        runs = json.loads(cli(folder, "runs", "-c", "vmboot", "--json").stdout)
        [run] = [r for r in runs if r["run_id"] == run_id]
        if (run["step"] or 0) >= step:
            return
        time.sleep(0.5)
    raise AssertionError(f"run {run_id} did not reach step {step} in {timeout_s:.0f}s")


def host_processes(cluster: str) -> list[psutil.Process]:
    records = vms.host_records(cluster)
    assert len(records) == 1
    return procs.members(records[0]["machine_id"])


def test_boot_errors_fail_up_as_the_host_reports_them_then_a_fixed_host_boots_from_its_own_root_and_rejoins_a_new_head(
        tmp_path) -> None:
    """Two clusters brought up at once, each with a host that cannot boot: one's podmanager
    wheel does not exist; the other's VM may not read the Ray token (a `secret-denied` fault
    outlasting the script's retries, as an IAM deny policy would). Then the first's spec is
    fixed and it is brought up again, as a user would: its slice is made again and its host
    boots from its own root; after a head crash, `up` again and the host rejoins."""
    missing = "gs://podmanager-sim-podmanager/boot/podmanager-9.9.9-py3-none-any.whl"
    folders = {name: tmp_path / name for name in ("vmboot", "tokenfail")}
    for folder in folders.values():
        folder.mkdir()
    spec(folders["vmboot"], "vmboot", boot={"podmanager": missing})
    spec(folders["tokenfail"], "tokenfail", simulation={"create_latency_s": 0.0, "delete_latency_s": 0.0,
                                                         "faults": [{"kind": "secret-denied", "times": 100}]})
    root = None
    try:
        started = time.monotonic()
        # The token-denied cluster's first `up` deletes what it made when it fails.
        ups = {name: subprocess.Popen([PODMANAGER, "up", "-f", "cluster.yaml", "--dry-run",
                                       *(["--delete-on-failure"] if name == "tokenfail" else [])],
                                      cwd=folder, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
               for name, folder in folders.items()}
        failed = {}
        for name, process in ups.items():
            _, stderr = process.communicate(timeout=240)
            failed[name] = (process.returncode, stderr, time.monotonic() - started)
        print({name: f"{took:.1f}s" for name, (_, _, took) in failed.items()})

        code, stderr, _ = failed["vmboot"]
        assert code == 1, stderr
        assert "slice 0 worker 0 (vmboot-s0) failed to boot" in stderr
        # The script's own error, as the host reported it: `up` stopped on the report, not at its
        # deadline for the join (which would name no error).
        assert f"download {missing} failed" in stderr and "404" in stderr
        # What the failed `up` leaves billing, and the command that deletes it.
        assert "Left running and billing: vmboot-s0 (v4-8, READY for " in stderr and "the Ray head" in stderr
        assert "'podmanager down -c vmboot' deletes them" in stderr

        code, stderr, _ = failed["tokenfail"]
        assert code == 1, stderr
        assert "slice 0 worker 0 (tokenfail-s0) failed to boot" in stderr
        assert "cannot read the Ray token secret podmanager-tokenfail-ray-token" in stderr
        assert "roles/secretmanager.secretAccessor" in stderr and "403" in stderr
        assert "--delete-on-failure: the cluster was deleted" in stderr
        assert not [n for n in sim_nodes() if n.cluster == "tokenfail"] and not vms.host_records("tokenfail")
        assert not procs.owned(procs.owner("tokenfail"))

        # The spec fixed, `up` again: the VM ran its script once, at boot, so the slice is made
        # again (a new boot), and its host joins.
        # The denial holds for every VM of the project (tokenfail, deleted by its failed up, is no more).
        cli(tmp_path, "sim", "inject", "-c", "vmboot", "clear")
        folder = folders["vmboot"]
        created = {n.name: n.create_time for n in sim_nodes()}
        spec(folder, "vmboot")
        again = cli(folder, "up", "-f", "cluster.yaml", "--dry-run")
        assert "replace slice 0 (v4-8, worker 0 failed to boot: download" in again.stdout + again.stderr
        assert {n.name: n.create_time for n in sim_nodes()}["vmboot-s0"] != created["vmboot-s0"]

        status = json.loads(cli(folder, "status", "-c", "vmboot", "--json").stdout)
        [host] = status["hosts"]
        mine = controller_versions()
        assert host["boot"] == "joined" and status["slices"][0]["boot"] == ["joined"]
        assert host["versions"] == {"python": mine.python, "ray": mine.ray, "jax": mine.jax,
                                    "podmanager": mine.podmanager}

        # Its processes: the guest's bash running the script, the join and Ray's, all from the VM's root.
        [record] = vms.host_records("vmboot")
        root = Path(record["temp_dir"])
        processes = host_processes("vmboot")
        commands = [" ".join(p.cmdline()) for p in processes]
        assert any("var/lib/google/startup-script" in c for c in commands), commands
        raylet = next(p for p in processes if p.name() == "raylet")
        assert Path(raylet.cwd()).is_relative_to(root)
        assert raylet.environ()["HOME"] == str(root / "root")
        token = root / "etc" / "podmanager" / "ray-token"
        assert stat.S_IMODE(token.stat().st_mode) == 0o600
        console = Path(record["log"]).read_text()
        assert "podmanager-startup[vmboot]" in console and token.read_text().strip() not in console

        # The head crashes with a run going; `up` starts another and tells the nodes: the host
        # rejoins, nothing is made again, and the run's supervisor carries on from its record.
        (folder / "hello.py").write_text("import os, jax\nprint('HELLO', jax.device_count(), os.environ['HOME'])\n")
        (folder / "steps.py").write_text(STEPS)
        created = {n.name: n.create_time for n in sim_nodes()}
        run_id = json.loads(cli(folder, "run", "-c", "vmboot", "--detach", "--json", "steps.py").stdout)["run_id"]
        wait_for_step(folder, run_id, 5)
        cli(folder, "sim", "head-crash", "-c", "vmboot")
        started = time.monotonic()
        again = cli(folder, "up", "-f", "cluster.yaml", "--dry-run")
        rejoin_s = time.monotonic() - started
        assert "metadata_update" in again.stdout + again.stderr
        assert {n.name: n.create_time for n in sim_nodes()} == created  # no slice made again
        print(f"up after a head crash, host rejoined: {rejoin_s:.1f}s")
        attached = cli(folder, "attach", run_id, "--json", timeout=180)
        result = json.loads(attached.stdout)
        assert result["status"] == "succeeded" and result["metrics"]["last_step"] == 60, attached.stdout
        events = cli(folder, "events", "-c", "vmboot").stdout
        assert f"run {run_id}: its supervisor was lost with the Ray head" in events

        # Only the head's raylet dies (its GCS still answers): `status` says so, `run` refuses at
        # once instead of waiting in `starting` for ever, and `up` starts the head again.
        head_record = json.loads((Path(os.environ["PODMANAGER_HOME"]) / "clusters/vmboot/head.json").read_text())
        [raylet] = [psutil.Process(p.pid) for p in procs.members(head_record["machine_id"]) if p.name() == "raylet"]
        os.kill(raylet.pid, signal.SIGKILL)
        psutil.wait_procs([raylet], timeout=10)
        status = json.loads(cli(folder, "status", "-c", "vmboot", "--json").stdout)
        assert "raylet not running" in status["head_problem"]
        assert [h["state"] for h in status["hosts"]] == ["unreachable"]
        refused = cli(folder, "run", "-c", "vmboot", "hello.py", check=False, timeout=30)
        assert refused.returncode != 0 and "raylet not running" in refused.stderr and "podmanager up" in refused.stderr
        cli(folder, "up", "-f", "cluster.yaml", "--dry-run")
        assert json.loads(cli(folder, "status", "-c", "vmboot", "--json").stdout)["head_problem"] is None
        ran = cli(folder, "run", "-c", "vmboot", "hello.py")
        assert f"HELLO 4 {root / 'root'}" in ran.stdout
    finally:
        cli(tmp_path, "sim", "inject", "-c", "vmboot", "clear", check=False)
        for name in folders:
            cli(tmp_path, "down", "-c", name, check=False)
    for name in folders:
        assert not vms.host_records(name)
        assert not [n for n in sim_nodes() if n.cluster == name]
        assert not procs.owned(procs.owner(name))
    assert root is None or not root.exists()


@pytest.mark.timeout(600)
def test_a_bare_vm_installs_everything_with_uv_and_runs_a_program(tmp_path) -> None:
    """No shortcut: an empty root; the script installs uv, Python, Ray, JAX and the wheel of
    this podmanager (staged in the simulated bucket) from the package index, then joins."""
    folder = tmp_path / "user"
    folder.mkdir()
    cluster_file = spec(folder, "bare", simulation={"create_latency_s": 0.0, "delete_latency_s": 0.0,
                                                    "vm_image": "bare"})
    (folder / "hello.py").write_text("import json, os, sys, jax\nprint('HELLO', jax.device_count(), sys.prefix)\n"
                                     "print('PATHS', json.dumps([sys.path, os.environ.get('PYTHONPATH'), "
                                     "os.environ.get('VIRTUAL_ENV'), os.environ['PATH']]))\n")
    try:
        started = time.monotonic()
        cli(folder, "up", "-f", cluster_file.name, "--dry-run", timeout=540)
        print(f"full install and join: {time.monotonic() - started:.1f}s")
        status = json.loads(cli(folder, "status", "-c", "bare", "--json").stdout)
        mine = controller_versions()
        assert status["hosts"][0]["versions"]["podmanager"] == mine.podmanager
        [record] = vms.host_records("bare")
        root = Path(record["temp_dir"])
        venv = root / "opt" / "podmanager" / "venv"
        assert venv.is_symlink() and Path(os.readlink(venv)).is_relative_to(root)  # its own, not the controller's
        # From the emulator's package index stand-in, the image's default index (where PyPI is on a real VM).
        assert f"from http://{package_index.HOST}:" in Path(record["log"]).read_text()
        ran = cli(folder, "run", "-c", "bare", "hello.py")
        assert "HELLO 4" in ran.stdout and str(root) in ran.stdout
        # Nothing of this machine's environment reached the VM's program: its modules come from
        # the VM's root, no PYTHONPATH of this machine's, no VIRTUAL_ENV, and
        # no folder of the controller's environment on its PATH.
        sys_path, pythonpath, virtual_env, path = json.loads(ran.stdout.split("PATHS ", 1)[1].splitlines()[0])
        assert virtual_env is None
        # (The run's own working folder is its PYTHONPATH, inside the VM's root.)
        assert all(Path(entry).is_relative_to(root) for entry in (pythonpath or "").split(os.pathsep) if entry)
        assert not [p for p in sys_path if p.startswith(sys.prefix) or "site-packages" in p and not p.startswith(str(root))]
        assert str(Path(sys.prefix) / "bin") not in path.split(os.pathsep)
    finally:
        cli(folder, "down", "-c", "bare", check=False)
