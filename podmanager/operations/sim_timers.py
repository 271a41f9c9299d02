"""Timers that make a dry-run cluster's scheduled faults happen on time.

The simulated cloud advances lazily, on each call. A preemption announced with a notice
(or a scripted fault, or the end of a repair) would otherwise wait for some podmanager
process to read the cloud. `schedule` starts a small detached process
(`python -m podmanager.operations.sim_wake`) that sleeps until the moment, reads the cloud once
(which applies the transition and boots or kills the simulated VMs through the usual
listeners), and exits. `stop` ends a cluster's pending timers; `down` calls it.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import psutil

from podmanager.core import paths
from podmanager.hosts import procs

log = logging.getLogger(__name__)

WAKE_MODULE = "podmanager.operations.sim_wake"
UNLABELLED = "_unlabelled"  # timers for nodes that carry no cluster label


def timers_dir(cluster: str | None) -> Path:
    path = paths.home() / "sim" / "timers" / (cluster or UNLABELLED)
    path.mkdir(parents=True, exist_ok=True)
    return path


def schedule(project: str, when: float, cluster: str | None) -> None:
    """Start a timer that wakes the simulated cloud of `project` at `when` (epoch seconds)."""
    env = os.environ.copy()
    if cluster:  # `down` finds it by its owner even when this folder's records of it are lost
        env[procs.OWNER_ENV] = procs.owner(cluster)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", WAKE_MODULE, project, repr(when), cluster or ""],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C in the terminal that scheduled it does not cancel the fault
            env=env,
        )
    except OSError as error:  # a fault that fires late is better than a failed cloud call
        log.warning("could not start a simulator timer: %s", error)
        return
    procs.write_record(timers_dir(cluster) / f"{proc.pid}.json", pid=proc.pid, at=when, project=project,
                       started=_create_time(proc.pid))
    threading.Thread(target=proc.wait, daemon=True).start()  # reap it when it exits: no zombie


def pending(cluster: str | None) -> list[int]:
    """Pids of this cluster's timers that are still waiting; forgets those that ended."""
    alive = []
    for path in sorted(timers_dir(cluster).glob("*.json")):
        record = procs.read_record(path)
        if record is not None and _is_ours(record):
            alive.append(record["pid"])
        else:
            path.unlink(missing_ok=True)
    return alive


def stop(cluster: str | None) -> int:
    """End every pending timer of the cluster; how many there were."""
    stopped = 0
    for pid in pending(cluster):
        try:
            psutil.Process(pid).kill()
            stopped += 1
        except psutil.Error:
            pass
        (timers_dir(cluster) / f"{pid}.json").unlink(missing_ok=True)
    return stopped


def forget(cluster: str | None, pid: int) -> None:
    """A timer that fired removes its own record."""
    (timers_dir(cluster) / f"{pid}.json").unlink(missing_ok=True)


def _create_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _is_ours(record: dict) -> bool:
    """The recorded timer is still running (not a recycled pid, not a zombie)."""
    try:
        proc = psutil.Process(record["pid"])
        return (proc.create_time() == record.get("started") and proc.status() != psutil.STATUS_ZOMBIE
                and WAKE_MODULE in " ".join(proc.cmdline()))
    except (psutil.Error, KeyError, TypeError):
        return False
