"""Records of a finished run preempted once (two attempts, one incident, a spare swap), as a
supervisor leaves them in the state store: for the dashboard's, timeline's and metrics' tests."""

from __future__ import annotations

from podmanager.core.events import EventKind
from podmanager.core.run_results import (
    AttemptResult,
    HostResult,
    IncidentRecord,
    Ledger,
    RunResult,
)
from podmanager.core.spec import parse_spec
from podmanager.core.workload import Workload
from podmanager.state import StateStore
from podmanager.state.run_records import RunRecord, RunStore

CLUSTER = "c"


def preempted_run(run_id: str = "r1", *, t0: float = 1_000_000.0, store: StateStore | None = None) -> RunRecord:
    """Attempt 1 on slice 0 (steps 0-10, preempted), attempt 2 on the spare, slice 2 (steps 7-20)."""
    store = store or StateStore()
    if store.get_cluster(CLUSTER) is None:
        store.save_cluster(CLUSTER, parse_spec({"name": CLUSTER, "backend": "simulated", "slices": [{"accelerator": "v4-8"}]}), "up")
    first = AttemptResult(attempt=1, status="interrupted", started=t0 + 2, ended=t0 + 17, setup_s=2,
                          hosts=[HostResult(slice=0, worker_id=0, exit_code=None)], first_step=0, first_step_time=t0 + 5,
                          last_step=10, last_step_time=t0 + 15, first_loss=2.0, last_loss=1.0)
    second = AttemptResult(attempt=2, status="succeeded", started=t0 + 26, ended=t0 + 44, setup_s=1,
                           hosts=[HostResult(slice=2, worker_id=0, exit_code=0)], first_step=7, first_step_time=t0 + 30,
                           last_step=20, last_step_time=t0 + 43, first_loss=1.1, last_loss=0.5)
    incident = IncidentRecord(attempt=1, cause="preemption", slices=[0], detail="slice 0 PREEMPTED",
                              detected_at=t0 + 16, detect_s=1.5, recover_s=14.0, lost_steps=4,
                              phases={"stop": 1.0, "swap": 0.1}, swaps=[[0, 2]])
    run = RunRecord(run_id, CLUSTER, Workload(command=["python", "train.py"]), [2], {}, None, status="succeeded",
                    attempt=2, created_at=t0 - 1)
    run.ledger = Ledger(attempts=[first, second], incidents=[incident])
    run.result = RunResult(run_id=run_id, cluster=CLUSTER, status="succeeded", message=f"run {run_id} succeeded",
                           hosts=second.hosts, attempts=2, preemptions=1, wall_s=44.0, incidents=[incident],
                           attempt_log=[first, second], goodput=0.45)
    RunStore(store.path).create(run)
    store.add_event(CLUSTER, EventKind.PREEMPTION_NOTICE, "preemption notice for slice 0", slice_index=0, when=t0 + 14)
    store.add_event(CLUSTER, EventKind.SPARE_SWAPPED, f"run {run_id}: hot spare slice 2 takes the place of lost slice 0",
                    when=t0 + 18, run_id=run_id, lost=0, spare=2, slices=[2])
    return RunStore(store.path).get(run_id)  # as read back


def checkpoints_of(run_id: str = "r1", *, t0: float = 1_000_000.0, store: StateStore | None = None) -> list[tuple[int, float]]:
    """The checkpoints `preempted_run`'s program saved, as its supervisor records them: step 6 in
    attempt 1 (steps 7-10 were done again), steps 12 and 18 in attempt 2. Returns (step, time)."""
    store = store or StateStore()
    saved = [(1, 6, t0 + 11.5), (2, 12, t0 + 36.0), (2, 18, t0 + 41.0)]
    for attempt, step, at in saved:
        store.add_event(CLUSTER, EventKind.CHECKPOINT_SAVED, f"checkpoint at step {step} saved", when=at + 0.2,
                        run_id=run_id, attempt=attempt, step=step, saved_at=at)
    return [(step, at) for _, step, at in saved]
