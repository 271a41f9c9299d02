"""A dry-run cluster of real local Ray hosts whose state folder is lost or whose state store is
damaged while a run goes: its simulated VMs stop themselves, and `podmanager down -c NAME
--dry-run` leaves no process of it on the machine and none of its temp dirs. Everything goes
through the CLI, in processes of its own, as a user meets it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from homes import home_env

from podmanager.core import paths
from podmanager.core.clock import poll_until
from podmanager.state.run_records import RunStore
from podmanager.vm import procs

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]
NAME = "lostfolder"
SPEC = f"""
name: {NAME}
slices: [{{accelerator: v5litepod-1, count: 1}}]
simulation: {{create_latency_s: 0.2, delete_latency_s: 0.0}}
health: {{interval_s: 0.5}}
"""


def cli(home: Path, *args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "podmanager", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **home_env(home)})


class Folder:
    """One state folder and what identifies its cluster's processes without it."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.owner = f"{NAME}@{home.resolve()}"
        self.temp_dir = Path(paths.machines_dir()) / hashlib.sha1(self.owner.encode()).hexdigest()[:8]

    def owned(self) -> list[str]:
        return [describe(p) for p in procs.owned(self.owner)]

    def mentioned(self) -> list[str]:
        """Any process (but this one) whose command line or environment names the folder:
        a check that does not rely on the owner tags it tests."""
        found = []
        for proc in psutil.process_iter(["pid", "cmdline", "environ"]):
            text = " ".join(proc.info["cmdline"] or []) + " ".join((proc.info["environ"] or {}).values())
            if proc.info["pid"] != os.getpid() and str(self.home) in text:
                found.append(describe(proc))
        return found

    def host_machines(self) -> set[str]:
        return {json.loads(p.read_text())["machine_id"] for p in (self.home / "clusters" / NAME / "hosts").glob("*.json")}

    def head_machine(self) -> str:
        return json.loads((self.home / "clusters" / NAME / "head.json").read_text())["machine_id"]

    def up_and_run(self, tmp_path: Path) -> str:
        spec = tmp_path / "spec.yaml"
        spec.write_text(SPEC)
        done = cli(self.home, "up", "-f", str(spec), "--dry-run")
        assert done.returncode == 0, done.stdout + done.stderr
        return self.start_run(tmp_path)

    def start_run(self, tmp_path: Path) -> str:
        """A long training run, detached, once it steps."""
        done = cli(self.home, "run", "-c", NAME, "--detach", "--json", "--working-dir", str(REPO), "--checkpoint-dir",
                   str(tmp_path / "ck"), "workloads/train_mlp.py", "--steps", "100000", "--log-every", "1",
                   "--min-step-s", "0.02")  # kept going until the test ends it: a core left to the rest
        assert done.returncode == 0, done.stdout + done.stderr
        run_id = json.loads(done.stdout)["run_id"]
        poll_until(lambda: self.step(run_id) >= 3, timeout_s=300, interval_s=0.2, what="the run to step")
        assert self.programs(), "the run's program is not running"
        return run_id

    def step(self, run_id: str) -> int:
        runs = RunStore(self.home / "state.db")
        try:
            run = runs.get(run_id)
            return (run.progress.step or 0) if run else 0
        finally:
            runs.close()

    def programs(self) -> list[str]:
        return [describe(p) for p in procs.owned(self.owner) if "train_mlp.py" in " ".join(cmdline(p))]

    def cleanup(self) -> None:
        """Whatever a failed test left of this folder's cluster: only its own processes."""
        procs.kill_owned(self.owner)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return []


def describe(proc: psutil.Process) -> str:
    return f"{proc.pid} {' '.join(cmdline(proc))[:100]}"


@pytest.fixture
def folder(tmp_path):
    folder = Folder(tmp_path / "home")
    yield folder
    folder.cleanup()


def remove(home: Path) -> None:
    """`rm -rf`, again until it is gone: the cluster's processes write into it meanwhile (run
    logs, the host monitor) until their leases or records tell them it is gone."""
    poll_until(lambda: shutil.rmtree(home, ignore_errors=True) or not home.exists(), timeout_s=30, interval_s=0.1,
               what=f"{home} to be removed")


def assert_nothing_left(folder: Folder) -> None:
    assert folder.owned() == []
    assert folder.mentioned() == []
    assert not folder.temp_dir.exists()


def test_rm_rf_during_a_run_then_up_in_the_lost_folder_then_a_store_damaged_during_a_run_and_down_leave_nothing(
        folder, tmp_path):
    """One cluster, two losses (one `up` fewer than a test each): the issue's sequence, the folder
    lost while a run goes and `up` of the same name again; then, on the cluster that `up` made,
    a store damaged while a run goes, and `down`, which leaves no process of either head."""
    old_head = rm_rf_during_a_run_then_up(folder, tmp_path)
    store_damaged_during_a_run(folder, tmp_path)

    down = cli(folder.home, "down", "-c", NAME, "--dry-run")
    assert down.returncode == 0, down.stdout + down.stderr
    assert "warning: the state store" in down.stderr and f"{NAME} is down" in down.stdout
    assert not procs.alive(old_head)  # the old head too, found by its owner tag
    assert_nothing_left(folder)


def rm_rf_during_a_run_then_up(folder: Folder, tmp_path: Path) -> str:
    """The folder lost while a run goes, then `up` of the same name again: its VMs stopped
    themselves, a new head; the old head is left to `down`. Returns the old head's machine."""
    folder.up_and_run(tmp_path)
    hosts, old_head = folder.host_machines(), folder.head_machine()
    assert hosts and all(procs.alive(m) for m in hosts)

    remove(folder.home)
    # The simulated VMs hold a lease on their records: they stop themselves, the program with them.
    poll_until(lambda: not any(procs.alive(m) for m in hosts), timeout_s=30, interval_s=0.2,
               what="the simulated VMs to stop without their records")
    assert folder.programs() == []
    assert procs.alive(old_head)  # the head has no lease: `down` finds it by its owner tag

    spec = tmp_path / "spec.yaml"
    done = cli(folder.home, "up", "-f", str(spec), "--dry-run")
    assert done.returncode == 0, done.stdout + done.stderr
    assert procs.alive(old_head) and folder.head_machine() != old_head
    status = cli(folder.home, "status", "-c", NAME, "--json")
    assert status.returncode == 0 and all(h["healthy"] for h in json.loads(status.stdout)["hosts"]), status.stdout
    return old_head


VERBS = (["status", "-c", NAME], ["runs", "-c", NAME], ["events", "-c", NAME], ["cancel", "RUN"],
         ["attach", "RUN"], ["run", "-c", NAME, "--detach", "workloads/train_mlp.py"])


def assert_refused_naming_the_store(folder: Folder, run_id: str, verbs) -> None:
    for verb in verbs:
        said = cli(folder.home, *[run_id if word == "RUN" else word for word in verb])
        assert said.returncode == 1, verb + [said.stdout + said.stderr]
        assert "state store" in said.stderr and "rebuild-state" in said.stderr and "Traceback" not in said.stderr


def store_damaged_during_a_run(folder: Folder, tmp_path: Path) -> None:
    """Truncated is tested with every verb in tests/state/test_db.py; here, end to end, the two
    ways a running supervisor meets a damaged store: overwritten in place it goes unseen while
    SQLite reads on from its WAL, then deleted it is seen."""
    run_id = folder.start_run(tmp_path)
    store = folder.home / "state.db"
    store.write_bytes(os.urandom(3 * 4096))  # garbage over it
    # A read, a verb on the run and a write (every verb meets a truncated store in tests/state/test_db.py).
    assert_refused_naming_the_store(folder, run_id, [VERBS[0], VERBS[3], ["up", "-f", str(tmp_path / "spec.yaml"),
                                                                          "--dry-run"]])
    logs = cli(folder.home, "logs", "-c", NAME)  # the run's output is in files: it needs no store
    assert logs.returncode == 0 and "step" in logs.stdout, logs.stderr

    store.unlink()
    # Its supervisor can no longer record the run: it stops the program rather than run it unseen.
    poll_until(lambda: folder.programs() == [], timeout_s=60, interval_s=0.2, what="the run's program to stop")
    assert_refused_naming_the_store(folder, run_id, VERBS[:1])
