"""Cancelling a run for a verb (`up --force`, `down`, cancelling a service): through its
supervisor, or, when that is gone, by marking its record (the teardown stops its processes)."""

from __future__ import annotations

from podmanager.cluster.cluster_runtime import ClusterRuntime
from podmanager.core.errors import PodmanagerError
from podmanager.core.events import EventKind
from podmanager.state.run_records import RunRecord, RunStore


def cancel_run(runtime: ClusterRuntime, runs: RunStore, run: RunRecord, message: str) -> None:
    from podmanager.api.run_handle import (
        RunHandle,  # the run machinery loads only when a run is cancelled
    )

    runtime.record(EventKind.CANCELLING, message, run_id=run.run_id)
    try:
        RunHandle(runtime.name, run.run_id, runs=runs, store=runtime.store).cancel(timeout_s=60)
    except PodmanagerError as stuck:  # its supervisor is gone: the teardown stops the processes
        runtime.record(EventKind.CANCEL_TIMEOUT, stuck.message)
        stuck_run = runs.get(run.run_id)
        if stuck_run is not None:
            stuck_run.status = "cancelled"
            runs.save(stuck_run)
