"""Where a run's supervisor lives: a detached, named Ray actor on the head node, one per run.

Ray keeps it alive: it outlives the client that submitted the run (a closed terminal, an
SSH drop, a `kill -9`), and when its own process dies Ray starts it again
(`max_restarts=-1`) with the same arguments. It holds nothing of its own: everything it
needs is in the run's durable record, which the supervisor re-reads on start and carries
on from (see supervision/supervisor.py).
"""

from __future__ import annotations

import logging
import os
import threading
import traceback

from podmanager.attempts import package
from podmanager.controller import head_actors
from podmanager.state.run_records import RunStore

log = logging.getLogger(__name__)


def actor_name(run_id: str) -> str:
    return f"supervisor-{run_id}"


class SupervisorActor:
    """Plain class; `start_supervisor` wraps it with `ray.remote` and its options."""

    def __init__(self, home: str, cluster: str, run_id: str, code: str | None) -> None:
        head_actors.enter_home(home)
        self.cluster = cluster
        self.run_id = run_id
        # The run's code, kept on this machine by its digest at submit (see start_supervisor).
        self.code_zip = package.kept_zip(cluster, run_id, code) if code else None
        self._thread = threading.Thread(target=self._supervise, name=f"supervise-{run_id}", daemon=True)
        self._thread.start()

    def pid(self) -> int:
        return os.getpid()

    def _supervise(self) -> None:
        from podmanager.cluster.cluster_runtime import ClusterRuntime
        from podmanager.cluster.hangs import arm_hangs
        from podmanager.core.errors import StateStoreError
        from podmanager.supervision.supervisor import RunSupervisor

        runs = None
        try:
            runs = RunStore()
            # Every event recorded through this cluster (a replaced slice, a retry) is the run's.
            cluster = ClusterRuntime.from_name(self.cluster, run_id=self.run_id)
            run = runs.get(self.run_id)
            first_start = run is not None and run.supervisor.starts == 0
            timers = arm_hangs(cluster) if first_start and cluster.spec.simulated else []
            try:
                RunSupervisor(cluster, runs, self.run_id, code_zip=self.code_zip).supervise()
            finally:
                for timer in timers:
                    timer.cancel()
        except StateStoreError as lost:
            # The run's record is gone or unusable: no one could follow, cancel or resume the run,
            # so it stops (the attempt's processes were stopped as the error passed through it).
            log.error("run %s stops: %s", self.run_id, lost)
        except Exception:  # noqa: BLE001 - the run must end with the reason, not hang unsupervised
            try:
                if runs is not None:
                    _record_crash(runs, self.run_id, traceback.format_exc())
            except StateStoreError as lost:
                log.error("run %s stops: %s", self.run_id, lost)
        self._leave()

    def _leave(self) -> None:
        """The run is over: this actor goes for good (not restarted)."""
        import ray

        ray.kill(ray.get_runtime_context().current_actor, no_restart=True)


def _record_crash(runs: RunStore, run_id: str, trace: str) -> None:
    last = trace.strip().splitlines()[-1]
    if end_run(runs, run_id, f"run {run_id} failed: its supervisor stopped with {last}"):
        log.error("supervisor of %s failed:\n%s", run_id, trace)


def end_run(runs: RunStore, run_id: str, message: str, status: str = "failed") -> bool:
    """End an unfinished run (`failed` or `cancelled`) with `message`, where no supervisor is
    left to do it; False if it had finished already."""
    from podmanager.core.run_results import RunResult
    from podmanager.state.run_state import Finished

    run = runs.get(run_id)
    if run is None or not run.active:
        return False
    result = RunResult.without_attempts(run_id, run.cluster, status, message, attempts=run.attempt)
    run.status, run.phase, run.result = status, Finished(), result
    runs.save(run)
    return True


def start_supervisor(cluster: str, run_id: str, code: str | None) -> None:
    """Create the run's supervisor actor (the caller is connected to the cluster's Ray);
    it builds its own `ClusterRuntime` from the cluster's stored spec.

    `code`: the digest of the run's code, kept in the run's folder on this machine by
    `attempts/package.keep` until the run ends (restarts of the actor included); the
    supervisor hands the zip on to the hosts."""
    head_actors.start(SupervisorActor, actor_name(run_id), cluster, run_id, code, runtime_env={
        "env_vars": {
            # Hosts of replaced simulated slices are children of this process; they must outlive it.
            "RAY_kill_child_processes_on_worker_exit": "false",
            # The supervisor (and the simulated hosts it boots when it replaces a slice) must not
            # lag behind the program it watches.
            **head_actors.NOT_SLOWED,
        }})

