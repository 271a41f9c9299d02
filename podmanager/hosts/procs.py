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

Why not a session per machine: Linux puts every session in its own CPU-scheduler
autogroup, and a multi-host JAX program whose processes sit in different autogroups steps
about 16% slower on a shared CPU (measured; see benchmarks/RESULTS.md). Machines therefore
stay in the session of whoever started them, in their own process group so that a Ctrl-C
at a terminal does not reach them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

MACHINE_ENV = "PODMANAGER_MACHINE_ID"


def write_record(path: Path, **fields: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(fields))
    os.replace(tmp, path)


def read_record(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def launch(command: list[str], env: dict[str, str], log_path: Path,
           machine_id: str | None = None) -> tuple[subprocess.Popen, str]:
    """Start `command` as a new machine (or on the machine `machine_id`); returns the process
    and the machine id."""
    machine_id = machine_id or uuid.uuid4().hex
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(
            command, env={**env, MACHINE_ENV: machine_id}, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, process_group=0,
        )
    return proc, machine_id


def machines() -> dict[str, list[psutil.Process]]:
    """Every live machine on this computer, with its processes (one scan)."""
    parents: dict[int, int] = {}
    tagged: dict[int, str] = {}
    live: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter(["ppid", "status", "environ"]):
        if proc.info["status"] in (None, psutil.STATUS_ZOMBIE):
            continue
        live[proc.pid] = proc
        parents[proc.pid] = proc.info["ppid"]
        machine_id = (proc.info["environ"] or {}).get(MACHINE_ENV)
        if machine_id:
            tagged[proc.pid] = machine_id
    found: dict[int, str | None] = {}

    def machine_of(pid: int) -> str | None:
        chain: list[int] = []
        seen: set[int] = set()  # a pid reused during the scan could close a loop
        while pid not in found and pid not in tagged and pid in parents and pid not in seen:
            chain.append(pid)
            seen.add(pid)
            pid = parents[pid]
        machine_id = found.get(pid, tagged.get(pid))
        for visited in chain:
            found[visited] = machine_id
        return machine_id

    out: dict[str, list[psutil.Process]] = {}
    for pid, proc in live.items():
        machine_id = machine_of(pid)
        if machine_id:
            out.setdefault(machine_id, []).append(proc)
    return out


def members(machine_id: str | None) -> list[psutil.Process]:
    return machines().get(machine_id, []) if machine_id else []


def alive(machine_id: str | None) -> bool:
    return bool(machine_id) and bool(members(machine_id))


def kill(machine_id: str | None, *, grace_s: float = 0.0, wait_s: float = 5.0) -> bool:
    """SIGTERM (if `grace_s`), then SIGKILL every process of the machine; True if any existed.

    A caller that is itself part of the machine (a program on a simulated host that
    preempts its own slice) goes last, like everything else on a VM that vanishes.
    """
    found = members(machine_id)
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
        found = [proc for proc in members(machine_id) if proc.pid != me]
    if inside:
        os.kill(me, signal.SIGKILL)
    return True


def _signal_all(found: list[psutil.Process], sig: signal.Signals) -> None:
    for proc in found:
        try:
            proc.send_signal(sig)
        except psutil.Error:
            pass
