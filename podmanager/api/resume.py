"""Runs whose supervisor was lost with the Ray head: started again once a new head is up.

A supervisor is a detached actor on the head node, so a head that crashed (or whose raylet
died) takes every supervisor with it, while the runs' records still say `running` and hold
their slices. `up` brings a new head and the hosts rejoin; then each such run gets its
supervisor again, which carries on from the run's record (its last checkpoint) with the code
kept on the controller at submit (`attempts/package.py`). A run whose code copy is
gone ends `failed`, saying why.
"""

from __future__ import annotations

import time

import psutil

from podmanager.attempts import package
from podmanager.cluster.cluster_runtime import ClusterRuntime
from podmanager.core.events import EventKind
from podmanager.state.run_records import RunRecord, RunStore

# A run no supervisor took on yet is its submit's business for this long (the submit is
# starting its supervisor); later, a supervisor that never came is lost too.
SUBMIT_GRACE_S = 60.0


def supervisor_gone(run: RunRecord) -> bool:
    """True when the process of the run's supervisor has ended (it runs on this machine, next
    to the head). Ray may be starting it again; a caller that must know asks Ray."""
    pid, started_at = run.supervisor.pid, run.supervisor.started_at
    if pid is None:
        return time.time() - run.created_at > SUBMIT_GRACE_S
    try:
        process = psutil.Process(pid)
        # A pid taken by another process since is no supervisor of ours.
        return started_at is not None and process.create_time() > started_at + 1.0
    except psutil.NoSuchProcess:
        return True


def _actor_lost(run: RunRecord) -> bool:
    from podmanager.controller import head_actors
    from podmanager.supervision.supervisor_actor import actor_name

    if run.supervisor.starts == 0 and time.time() - run.created_at <= SUBMIT_GRACE_S:
        return False
    return head_actors.find(actor_name(run.run_id)) is None


def restart_lost_supervisors(runtime: ClusterRuntime, runs: RunStore) -> list[str]:
    """Start a supervisor again for every unfinished run of the cluster that has none in its Ray
    cluster (this process is connected to it); the ids of the runs that carry on."""
    from podmanager.supervision.supervisor_actor import end_run, start_supervisor

    resumed = []
    for run in runs.active(runtime.name):
        if not _actor_lost(run):
            continue
        code = None
        if run.workload.working_dir is not None:
            code = package.kept_digest(runtime.name, run.run_id)
            if code is None:
                message = (f"run {run.run_id} failed: its supervisor was lost with the Ray head, and the copy of "
                           f"its code kept on the controller is gone; submit it again")
                end_run(runs, run.run_id, message)
                runtime.record(EventKind.RUN_FAILED, message, run_id=run.run_id)
                continue
        runtime.record(EventKind.SUPERVISOR_RESTARTING, f"run {run.run_id}: its supervisor was lost with the Ray head; "
                       "starting it again on the new head", run_id=run.run_id)
        start_supervisor(runtime.name, run.run_id, code)
        resumed.append(run.run_id)
    return resumed

