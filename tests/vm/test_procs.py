"""Local machines (`hosts.procs`): every process a launched machine starts is found and killed,
even one whose environment was wiped, and machines stay in the caller's session."""

from __future__ import annotations

import os
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from podmanager.core import paths
from podmanager.vm import procs

# Starts a child with an empty environment (as if it had overwritten its own, the way
# setproctitle can), which starts a grandchild; writes its own pid and the child's, then waits.
MACHINE = textwrap.dedent(
    """
    import os, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c",
        "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']);"
        " time.sleep(120)"], env={})
    open(sys.argv[1] + ".tmp", "w").write(f"{os.getpid()} {child.pid}")
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(120)
    """
)


def launch(tmp_path: Path, name: str):
    ready = tmp_path / f"{name}.pids"
    log = tmp_path / f"{name}.log"
    proc, machine_id = procs.launch([sys.executable, "-c", MACHINE, str(ready)], dict(os.environ), log)
    deadline = time.monotonic() + 30
    while not ready.exists() or len(procs.members(machine_id)) < 3:
        assert time.monotonic() < deadline, f"machine {name} did not start: {log.read_text()}"
        time.sleep(0.05)
    return proc, machine_id, [int(p) for p in ready.read_text().split()]


def live(proc: psutil.Process | int) -> bool:
    try:
        proc = psutil.Process(proc) if isinstance(proc, int) else proc
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def machines(tmp_path):
    started = []

    def start(name):
        proc, machine_id, pids = launch(tmp_path, name)
        started.append((proc, machine_id))
        return proc, machine_id, pids

    yield start
    for proc, machine_id in started:
        procs.kill(machine_id)
        proc.wait(10)


def test_a_machine_is_every_process_it_started_even_without_the_tag(machines):
    proc, machine_id, (root, child) = machines("a")
    member_pids = {p.pid for p in procs.members(machine_id)}
    assert root == proc.pid and {root, child} <= member_pids and len(member_pids) == 3
    assert procs.MACHINE_ENV not in psutil.Process(child).environ()  # found through its parent
    assert os.getpid() not in member_pids and procs.alive(machine_id)


def test_machines_share_the_callers_session_in_their_own_process_group(machines):
    proc, _, _ = machines("a")
    # A session of its own would put each simulated host in its own CPU-scheduler autogroup.
    assert os.getsid(proc.pid) == os.getsid(0)
    assert os.getpgid(proc.pid) == proc.pid != os.getpgid(0)


def test_kill_takes_one_machine_and_leaves_the_other(machines):
    proc_a, machine_a, pids_a = machines("a")
    _, machine_b, _ = machines("b")
    members_a = procs.members(machine_a)
    assert procs.kill(machine_a) is True
    proc_a.wait(10)
    assert not procs.alive(machine_a) and procs.members(machine_a) == []
    assert not any(live(p) for p in members_a)
    assert len(procs.members(machine_b)) == 3 and procs.alive(machine_b)
    assert procs.kill(machine_a) is False  # nothing left to kill


def test_a_process_that_kills_its_own_machine_takes_everything_with_it(tmp_path):
    """E.g. a program on a simulated host that preempts its own slice: nothing is left frozen."""
    pids = tmp_path / "pids"
    code = textwrap.dedent(
        f"""
        import os, subprocess, sys, time
        from podmanager.vm import procs
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        open({str(pids)!r}, "w").write(str(child.pid))
        procs.kill(os.environ[procs.MACHINE_ENV])
        time.sleep(120)
        """
    )
    proc, machine_id = procs.launch([sys.executable, "-c", code], dict(os.environ), tmp_path / "log")
    try:
        assert proc.wait(60) == -9, (tmp_path / "log").read_text()
        assert not live(int(pids.read_text()))
        assert procs.members(machine_id) == []
    finally:
        procs.kill(machine_id)


def test_unknown_or_missing_machine_ids_are_not_alive():
    assert not procs.alive(None) and not procs.alive("no-such-machine")
    assert procs.members(None) == [] and procs.kill(None) is False


def test_down_removes_the_folder_of_the_clusters_simulated_vms_once_it_is_empty(tmp_path, monkeypatch):
    """The simulated cloud's folder is not the home (issue 43, 3): the VMs' folder is another than
    the head's, and each VM removes only its own root, which left the folder behind, empty."""
    monkeypatch.setenv("PODMANAGER_SIM_HOME", str(tmp_path / "cloud"))
    vms_folder = Path(procs.temp_dir_of(procs.sim_owner("c")))
    assert vms_folder != Path(procs.owner_temp_dir("c"))
    (vms_folder / "0123abcd").mkdir(parents=True)  # a VM still there (a controller VM running its own `down`)
    procs.stop_cluster("c")
    assert (vms_folder / "0123abcd").is_dir()
    (vms_folder / "0123abcd").rmdir()  # the VM went
    procs.stop_cluster("c")
    assert not vms_folder.exists()


def test_the_last_vm_to_remove_its_root_removes_its_clusters_folder(tmp_path, monkeypatch):
    """`down` kills the VMs, and each removes its own root a moment later (its lease lost): the
    last one to go takes the cluster's folder with it, so none is left behind empty."""
    monkeypatch.setenv("PODMANAGER_SIM_HOME", str(tmp_path / "cloud"))
    vms_folder = Path(procs.temp_dir_of(procs.sim_owner("c")))
    first, last = vms_folder / "0123abcd", vms_folder / "4567ef01"
    for root in (first, last):
        (root / "tmp").mkdir(parents=True)
    procs.stop_cluster("c")  # the VMs still remove themselves
    procs.remove_temp_dir(str(first))
    assert not first.exists() and vms_folder.is_dir()  # another VM lives on in it
    procs.remove_temp_dir(str(last))
    assert not vms_folder.exists()
    assert Path(paths.machines_dir()).is_dir()  # the machines folder itself stays
