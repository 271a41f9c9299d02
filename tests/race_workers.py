"""What the processes of the race tests run, and how they are started and stopped: a module
of its own, so that a spawned process imports only what its work needs (not the test module
and everything it imports)."""

from __future__ import annotations

import multiprocessing
import os
from typing import Any

SPAWN = multiprocessing.get_context("spawn")  # fresh interpreters: no threads or locks inherited


def start(target, *args) -> multiprocessing.Process:  # type: ignore[no-untyped-def]
    proc = SPAWN.Process(target=target, args=args)
    proc.start()
    return proc


def stop_all(procs: list[multiprocessing.Process]) -> None:
    """Wait for each process to end (30 s), killing one that does not."""
    for proc in procs:
        proc.join(timeout=30)
        if proc.is_alive():
            proc.kill()
            proc.join()


def claim_rounds(home: str, worker: int, rounds: int, barrier: Any, results: Any) -> None:
    """In every round, claim slice 0 of that round's cluster at the same moment as the
    other processes; put (round, run id, the run in the way or None)."""
    os.environ["PODMANAGER_HOME"] = home
    from podmanager.state.run_records import RunRecord, RunStore

    runs = RunStore()
    for round_ in range(rounds):
        barrier.wait(timeout=60)
        run = RunRecord(f"r{round_}-w{worker}", f"c{round_}", {}, [0], {}, None)
        holder = runs.claim(run)
        results.put((round_, run.run_id, None if holder is None else holder.run_id))


def hold_in_turns(home: str, cluster: str, rounds: int, barrier: Any, log: str) -> None:
    """In every round, take the cluster's lock at the same moment as the other processes and
    write 'enter PID' and 'exit PID' lines to `log` while holding it."""
    os.environ["PODMANAGER_HOME"] = home
    from podmanager.state.lock import cluster_lock

    for _ in range(rounds):
        barrier.wait(timeout=60)
        with cluster_lock(cluster, "up", timeout_s=60):
            append(log, f"enter {os.getpid()}")
            append(log, f"exit {os.getpid()}")


def append(path: str, line: str) -> None:
    """One line, in one write (O_APPEND: lines of several writers never mix)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


def hold_until_told(home: str, cluster: str, held: Any, release: Any) -> None:
    """Hold the cluster's lock from `held` until `release` (or being killed)."""
    os.environ["PODMANAGER_HOME"] = home
    from podmanager.state.lock import cluster_lock

    with cluster_lock(cluster, "up", timeout_s=60):
        held.set()
        release.wait(timeout=60)


def up_while_holding(home: str, spec: dict[str, Any], held: Any, release: Any) -> None:
    """An `up` that has the cluster's lock from `held`, and starts its work on `release`."""
    os.environ["PODMANAGER_HOME"] = home
    from podmanager.api import Cluster
    from podmanager.state.lock import cluster_lock

    with cluster_lock(spec["name"], "up", timeout_s=60):
        held.set()
        release.wait(timeout=60)
        Cluster.from_dict(spec, dry_run=True).up(timeout_s=60)


def up_rounds(home: str, spec: dict[str, Any], rounds: int, barrier: Any, results: Any) -> None:
    """In every round, `up` that round's cluster (the spec named NAME-ROUND) at the same moment
    as the other processes; put (round, pid, [(event kind, message)])."""
    os.environ["PODMANAGER_HOME"] = home
    from podmanager.api import Cluster

    for round_ in range(rounds):
        said: list[tuple[str, str]] = []
        cluster = Cluster.from_dict({**spec, "name": f"{spec['name']}-{round_}"}, dry_run=True,
                                    on_event=lambda e: said.append((e.kind, e.message)))  # noqa: B023
        barrier.wait(timeout=60)
        cluster.up(timeout_s=60)
        results.put((round_, os.getpid(), said))
