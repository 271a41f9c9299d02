"""A cluster's local processes are found by their owner (cluster name and state folder) with
no record of them, and only those: a cluster of the same name in another state folder is
left alone. A simulated VM holds a lease on its host record and stops itself without it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from podmanager.core import paths
from podmanager.core.clock import poll_until
from podmanager.emulator import launcher, vm_lease
from podmanager.vm import procs

# Starts a child with an empty environment (as a process that overwrote its own would look),
# writes the child's pid, then waits.
MACHINE = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], env={})\n"
    "open(sys.argv[1], 'w').write(str(child.pid))\n"
    "time.sleep(120)\n"
)


def live(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def started():
    """Launch machines; whatever a test leaves is killed after it."""
    machines: list[tuple[object, str]] = []

    def launch(tmp: Path, name: str, owner: str | None) -> tuple[int, int, str]:
        pid_file = tmp / f"{name}.pid"
        proc, machine_id = procs.launch([sys.executable, "-c", MACHINE, str(pid_file)], dict(os.environ),
                                        tmp / f"{name}.log", owner=owner)
        machines.append((proc, machine_id))
        poll_until(lambda: pid_file.exists() and pid_file.read_text(), timeout_s=30, interval_s=0.05,
                   what=f"machine {name} to start")
        return proc.pid, int(pid_file.read_text()), machine_id

    yield launch
    for proc, machine_id in machines:
        procs.kill(machine_id)
        proc.wait(10)


def test_the_owner_is_the_cluster_name_and_the_resolved_state_folder(podmanager_home, monkeypatch, tmp_path):
    assert procs.owner("demo") == f"demo@{podmanager_home.resolve()}"
    link = tmp_path / "link"
    link.symlink_to(podmanager_home)
    monkeypatch.setenv("PODMANAGER_HOME", str(link))  # the same folder by another path: the same owner
    assert procs.owner("demo") == f"demo@{podmanager_home.resolve()}"
    assert procs.owner_temp_dir("demo").startswith(f"{paths.machines_dir()}/")
    monkeypatch.setenv("PODMANAGER_HOME", str(tmp_path / "other"))
    assert procs.owner("demo") != f"demo@{podmanager_home.resolve()}"


def test_stop_cluster_kills_its_owners_processes_with_no_record_and_spares_a_namesake(
        started, podmanager_home, tmp_path, monkeypatch):
    ours = started(tmp_path, "ours", procs.owner("demo"))
    monkeypatch.setenv("PODMANAGER_HOME", str(tmp_path / "elsewhere"))
    theirs = started(tmp_path, "theirs", procs.owner("demo"))  # same name, another state folder
    monkeypatch.setenv("PODMANAGER_HOME", str(podmanager_home))
    temp_dir = Path(procs.owner_temp_dir("demo"))
    (temp_dir / "head").mkdir(parents=True)
    try:
        found = {p.pid for p in procs.owned(procs.owner("demo"))}
        assert {ours[0], ours[1]} <= found  # the child is found through its parent: its environment is empty
        assert not {theirs[0], theirs[1]} & found

        assert procs.stop_cluster("demo") == len(found)
        assert not live(ours[0]) and not live(ours[1])
        assert live(theirs[0]) and live(theirs[1])
        assert not temp_dir.exists()
        assert procs.stop_cluster("demo") == 0
    finally:
        procs.remove_temp_dir(str(temp_dir))


def test_down_of_a_cluster_without_any_record_stops_its_processes_and_says_how_it_found_them(
        started, podmanager_home, tmp_path):
    from typer.testing import CliRunner

    from podmanager.cli import app

    parent, child, _ = started(tmp_path, "head", procs.owner("gone"))  # the state folder has no trace of it
    result = CliRunner().invoke(app, ["down", "-c", "gone", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "stopped 2 process(es) of gone on this machine (found by their owner tag in the process table)" \
        in result.output
    assert not live(parent) and not live(child)


def test_a_process_that_keeps_only_its_machine_id_belongs_to_the_machines_owner(started, podmanager_home, tmp_path):
    """As a run's program does: its environment is filtered down to the machine id."""
    root, _, machine_id = started(tmp_path, "host", procs.owner("demo"))
    program = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                               env={procs.MACHINE_ENV: machine_id}, start_new_session=True)  # not the host's child
    try:
        # Until the kernel has laid out the new program's environment (just after its exec, which
        # lets Popen return first) /proc shows none: it is owned once it shows one.
        poll_until(lambda: program.pid in {p.pid for p in procs.owned(procs.owner("demo"))}, timeout_s=10,
                   interval_s=0.02, what="the program to be owned by its machine's owner")
        assert procs.stop_cluster("demo") >= 2
        program.wait(10)  # (the kill reaped it: its exit status is gone)
        assert not live(program.pid) and not live(root)
    finally:
        if program.poll() is None:
            program.kill()
            program.wait(10)


def test_a_machine_never_inherits_the_owner_of_the_process_that_starts_it(monkeypatch, tmp_path):
    monkeypatch.setenv(procs.OWNER_ENV, "someone@/else")
    proc, machine_id = procs.launch([sys.executable, "-c", "import time; time.sleep(60)"], dict(os.environ),
                                    tmp_path / "log")
    try:
        assert procs.OWNER_ENV not in psutil.Process(proc.pid).environ()
        # Found by its machine tag. One CI run's scan missed the process just started (cause not
        # found; the note of 2026-11-24 says so), so the scan is asked until it finds it.
        poll_until(lambda: procs.members(machine_id), timeout_s=5, interval_s=0.05, what="the machine's process")
        assert not procs.owned("someone@/else")
    finally:
        procs.kill(machine_id)
        proc.wait(10)


def test_the_emulator_is_no_clusters_process(podmanager_home):
    """Started by a cluster's command, the emulator serves the whole project: `down` of one
    cluster (by its owner tag) must not stop it."""
    os.environ[procs.OWNER_ENV] = procs.owner("demo")  # as if a process of cluster demo started it
    try:
        launcher.ensure("podmanager-sim")
    finally:
        del os.environ[procs.OWNER_ENV]
    pid = launcher.running("podmanager-sim").pid
    assert pid in {p.pid for p in procs.owned(launcher.owner("podmanager-sim"))}
    assert procs.stop_cluster("demo") == 0 and live(pid)
    assert launcher.stop("podmanager-sim") and not live(pid)


def test_the_lease_is_held_while_the_record_names_the_machine(tmp_path):
    record = tmp_path / "vm.json"
    procs.write_record(record, machine_id="m1")
    assert vm_lease.holds(record, "m1")
    assert not vm_lease.holds(record, "m2")
    procs.write_record(record, machine_id="m2")  # a new VM in its place
    assert not vm_lease.holds(record, "m1")
    record.unlink()
    assert not vm_lease.holds(record, "m2")


def test_keep_returns_only_after_the_record_is_gone_twice_in_a_row(tmp_path, monkeypatch):
    record = tmp_path / "vm.json"
    procs.write_record(record, machine_id="m1")
    killed: list[str] = []
    monkeypatch.setattr(procs, "kill", lambda machine_id, **_: killed.append(machine_id) or True)
    checks = []

    def sleep(_: float) -> None:
        checks.append(1)
        if len(checks) == 3:
            record.unlink()  # gone before the 3rd look
        if len(checks) == 4:
            procs.write_record(record, machine_id="m1")  # back for the 4th: one odd read is not enough
        if len(checks) == 5:
            record.unlink()

    vm_lease.keep(record, "m1", None, interval_s=0, sleep=sleep)
    assert len(checks) == 6 and killed == ["m1"]


@pytest.mark.processes  # starts processes: seconds, not milliseconds
def test_a_simulated_vm_stops_itself_when_its_record_is_gone(tmp_path):
    """A machine with a lease holder, as `SimHostBooter` starts one: deleting the record (as
    `rm -rf $PODMANAGER_SIM_HOME` does) stops every process of it, also what it launched as a
    machine of its own (a controller VM's Ray head, issue 43, 3), and removes its temp dir."""
    record = tmp_path / "hosts" / "demo-s0-w0.json"
    temp_dir = paths.machines_dir() / f"test-{os.getpid()}-lease"
    temp_dir.mkdir(parents=True, exist_ok=True)
    machine_id = procs.new_machine_id()
    procs.write_record(record, machine_id=machine_id)
    guest = {**os.environ, procs.ROOT_ENV: str(temp_dir)}  # every simulated VM's environment names its root
    sleep = [sys.executable, "-c", "import time; time.sleep(120)"]
    vm, _ = procs.launch(sleep, guest, tmp_path / "log", machine_id)
    head, head_machine = procs.launch(sleep, guest, tmp_path / "log")  # a machine of its own, on the VM
    holder, _ = procs.launch([sys.executable, "-m", "podmanager.emulator.vm_lease", "--lease", str(record),
                              "--temp-dir", str(temp_dir)], guest, tmp_path / "log", machine_id)
    try:
        poll_until(lambda: len(procs.members(machine_id)) == 2, timeout_s=30, interval_s=0.05, what="the VM")
        record.unlink()
        assert holder.wait(30) == 0, (tmp_path / "log").read_text()
        assert vm.wait(10) == -9 and head.wait(10) == -9
        assert procs.members(machine_id) == [] and not temp_dir.exists()
    finally:
        procs.kill(machine_id)
        procs.kill(head_machine)
        procs.remove_temp_dir(str(temp_dir))
