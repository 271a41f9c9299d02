"""Local "machines" podmanager starts (the Ray head, simulated TPU VMs): launch one, find
all of its processes later, and kill them, from any process.

`ray start` daemonizes GCS, raylet, agents and log monitor, and the raylet forks workers,
each in a process group of its own; the workload processes are children of those workers.
So a machine is tagged with a random id in the environment of the process that starts
it, `PODMANAGER_MACHINE_ID`, and its processes are those that carry the tag or descend
from one that does (a process that renames itself with setproctitle, as Ray's agents do,
may overwrite the environment the kernel shows for it). The id, recorded in a small JSON
file, lets any later process (`down`, a test teardown, a new CLI after a crash) find and
kill the whole machine, without a broad `ray stop` that would also hit clusters
podmanager does not own.

Every machine of a cluster also carries its owner, `PODMANAGER_OWNER=<cluster>@<state
folder>`: the two things a user still names after the folder is lost (`-c NAME`, and
`$PODMANAGER_HOME`, or its default). So `down` finds a cluster's processes by scanning the
process table (`owned`) even when no record of them is left, and never those of a cluster of
the same name that belongs to another state folder (another user's, another test's).

Why not a session per machine: Linux puts every session in its own CPU-scheduler
autogroup, and a multi-host JAX program whose processes sit in different autogroups steps
about 16% slower on a shared CPU (measured; see benchmarks/RESULTS.md). Machines therefore
stay in the session of whoever started them, in their own process group so that a Ctrl-C
at a terminal does not reach them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any, Callable, TypeVar

import psutil

from podmanager.core import paths
from podmanager.core.errors import UnsafeFolderError
from podmanager.core.files import write_atomic
from podmanager.core.machine_folders import (  # noqa: F401 - named here too for procs' callers
    owner,
    owner_temp_dir,
    remove_vms_folder,
    sim_owner,
    temp_dir_of,
)

MACHINE_ENV = "PODMANAGER_MACHINE_ID"
OWNER_ENV = "PODMANAGER_OWNER"
ROOT_ENV = "PODMANAGER_ROOT"  # a simulated VM's root folder, in the environment of all it runs



def write_record(path: Path, **fields: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(fields))


def read_record(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def new_machine_id() -> str:
    return uuid.uuid4().hex


def launch(command: list[str], env: dict[str, str], log_path: Path,
           machine_id: str | None = None, *, owner: str | None = None,
           cwd: Path | None = None) -> tuple[subprocess.Popen, str]:
    """Start `command` as a new machine (or on the machine `machine_id`) belonging to `owner`
    (see `owner()`); returns the process and the machine id."""
    machine_id = machine_id or new_machine_id()
    env = {**env, MACHINE_ENV: machine_id}
    env.pop(OWNER_ENV, None)  # never the owner of whoever starts it (a supervisor booting a VM)
    if owner:
        env[OWNER_ENV] = owner
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, process_group=0,
            cwd=cwd,
        )
    return proc, machine_id


# What a process carries, or inherits from its nearest tagged ancestor: (machine id, owner).
_Tag = tuple[str | None, str | None]
_Mark = TypeVar("_Mark")


def _inherited(mark: Callable[[dict[str, str]], _Mark | None]) -> list[tuple[psutil.Process, _Mark]]:
    """Every live process whose environment `mark`s it, or that descends from one so marked, with
    the nearest mark (one scan): a process that renamed itself (Ray's agents) may have overwritten
    the environment the kernel shows for it, but not its parent."""
    parents: dict[int, int] = {}
    marked: dict[int, _Mark] = {}
    live: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter(["ppid", "status", "environ"]):
        if proc.info["status"] in (None, psutil.STATUS_ZOMBIE):
            continue
        live[proc.pid] = proc
        parents[proc.pid] = proc.info["ppid"]
        found_mark = mark(proc.info["environ"] or {})
        if found_mark is not None:
            marked[proc.pid] = found_mark
    found: dict[int, _Mark | None] = {}

    def mark_of(pid: int) -> _Mark | None:
        chain: list[int] = []
        seen: set[int] = set()  # a pid reused during the scan could close a loop
        while pid not in found and pid not in marked and pid in parents and pid not in seen:
            chain.append(pid)
            seen.add(pid)
            pid = parents[pid]
        value = found.get(pid, marked.get(pid))
        for visited in chain:
            found[visited] = value
        return value

    return [(proc, value) for pid, proc in live.items() if (value := mark_of(pid)) is not None]


def _tag(environ: dict[str, str]) -> _Tag | None:
    tag = (environ.get(MACHINE_ENV) or None, environ.get(OWNER_ENV) or None)
    return None if tag == (None, None) else tag


def _scan() -> list[tuple[psutil.Process, _Tag]]:
    """Every live process that is tagged or descends from a tagged one, with its tag (one scan)."""
    found = _inherited(_tag)
    # A process may carry its machine without the owner (a program's environment is filtered
    # down to the machine id): the owner is its machine's.
    owners = {machine_id: owner for _, (machine_id, owner) in found if machine_id and owner}
    return [(proc, (machine_id, owner or owners.get(machine_id or ""))) for proc, (machine_id, owner) in found]


def machines() -> dict[str, list[psutil.Process]]:
    """Every live machine on this computer, with its processes (one scan)."""
    out: dict[str, list[psutil.Process]] = {}
    for proc, (machine_id, _) in _scan():
        if machine_id:
            out.setdefault(machine_id, []).append(proc)
    return out


def owned(owner: str) -> list[psutil.Process]:
    """Every live process of `owner`'s machines, and any other process tagged with it (one scan)."""
    return [proc for proc, (_, tagged_owner) in _scan() if tagged_owner == owner]


def inside(root: str) -> list[psutil.Process]:
    """Every live process whose environment names `root` as its VM's root folder (`ROOT_ENV`), or
    that descends from one: all a simulated VM runs, also what it launched as machines of their
    own (a controller VM's Ray head) (one scan)."""
    return [proc for proc, _ in _inherited(lambda environ: True if environ.get(ROOT_ENV) == root else None)]


def kill_inside(root: str, *, wait_s: float = 10.0, spare_caller: bool = False) -> bool:
    """SIGKILL every process of the simulated VM whose root folder is `root` (`inside`), as a
    machine that crashed; True if any ran. `spare_caller` as in `kill`."""
    return _kill_all(lambda: inside(root), grace_s=0.0, wait_s=wait_s, spare_caller=spare_caller)


def members(machine_id: str | None) -> list[psutil.Process]:
    return machines().get(machine_id, []) if machine_id else []


def alive(machine_id: str | None) -> bool:
    return bool(machine_id) and bool(members(machine_id))


def kill(machine_id: str | None, *, grace_s: float = 0.0, wait_s: float = 5.0, spare_caller: bool = False) -> bool:
    """SIGTERM (if `grace_s`), then SIGKILL every process of the machine; True if any existed.

    A caller that is itself part of the machine (a program on a simulated host that
    preempts its own slice) goes last, like everything else on a VM that vanishes, unless
    `spare_caller` (it has something left to do, and exits itself).
    """
    return _kill_all(lambda: members(machine_id), grace_s=grace_s, wait_s=wait_s, spare_caller=spare_caller)


def kill_owned(owner: str, *, grace_s: float = 0.0, wait_s: float = 10.0) -> int:
    """SIGTERM (if `grace_s`), then SIGKILL every process of `owner`; how many there were."""
    found = owned(owner)
    if found:
        _kill_all(lambda: owned(owner), grace_s=grace_s, wait_s=wait_s, first=found)
    return len(found)


def stop_cluster(cluster: str) -> int:
    """Kill every local process of `cluster` in this state folder, whether or not any record
    names it, and remove its Ray temp dirs; how many processes there were."""
    killed = kill_owned(owner(cluster))
    with contextlib.suppress(UnsafeFolderError):  # not this user's folder: nothing in it is ours to remove
        remove_temp_dir(owner_temp_dir(cluster))
    remove_vms_folder(cluster)
    return killed


def remove_temp_dir(path: str | None) -> None:
    """Remove one of podmanager's machine folders (never anything outside `paths.machines_dir()`),
    and the folder of its cluster's machines with it once that holds nothing else: the last
    simulated VM to go removes it, as `down` cannot while a VM is still removing itself."""
    if path and _ours(path):
        shutil.rmtree(path, ignore_errors=True)
        parent = os.path.dirname(path.rstrip("/"))
        if _ours(parent):  # a cluster's folder, never the machines folder itself
            with contextlib.suppress(OSError):  # not empty: another machine of the cluster lives on
                os.rmdir(parent)


def _ours(path: str) -> bool:
    """Whether `path` lies inside this user's machines folder, that folder being safe to use."""
    try:
        base = paths.machines_dir()
    except UnsafeFolderError:  # another user's, or a link: nothing in it is ours to remove
        return False
    return path.startswith(f"{base}/") and ".." not in path


def _kill_all(find: Callable[[], list[psutil.Process]], *, grace_s: float, wait_s: float,
              spare_caller: bool = False, first: list[psutil.Process] | None = None) -> bool:
    found = find() if first is None else first
    if not found:
        return False
    me = os.getpid()
    inside = any(proc.pid == me for proc in found)
    found = [proc for proc in found if proc.pid != me]
    if grace_s > 0:
        _signal_all(found, signal.SIGTERM)
        psutil.wait_procs(found, timeout=grace_s)
    deadline = time.monotonic() + wait_s
    # Repeat: a process forked between the scan and the signal is caught by the next scan.
    while found and time.monotonic() < deadline:
        # Freeze them all first, like a VM that is gone at once: otherwise a Ray agent that
        # outlives its raylet by a moment tells every driver the raylet died unexpectedly.
        _signal_all(found, signal.SIGSTOP)
        _signal_all(found, signal.SIGKILL)
        psutil.wait_procs(found, timeout=0.05)
        found = [proc for proc in find() if proc.pid != me]
    if inside and not spare_caller:
        os.kill(me, signal.SIGKILL)
    return True


def _signal_all(found: list[psutil.Process], sig: signal.Signals) -> None:
    for proc in found:
        try:
            proc.send_signal(sig)
        except psutil.Error:
            pass
