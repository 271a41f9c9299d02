"""A run's timeline (state/run_timeline.py): its bars, incidents and marks from the record and the
event log, and the badput buckets, which never overlap and so sum to the wall time."""

from __future__ import annotations

import pytest

from podmanager.core.event_data import stored
from podmanager.core.run_results import (
    AttemptResult,
    HostResult,
    IncidentRecord,
    Ledger,
    RunProgress,
    RunResult,
)
from podmanager.core.workload import Workload
from podmanager.state.run_records import RunRecord
from podmanager.state.run_state import Running
from podmanager.state.run_timeline import BUCKETS, build, of_record
from podmanager.state.store import Event

T0 = 1_000_000.0


def attempt(n: int, *, setup_at: float, started: float, first: tuple[int, float] | None,
            last: tuple[int, float] | None, ended: float, status: str = "succeeded", slices: tuple[int, ...] = (0,),
            degraded: bool = False) -> AttemptResult:
    return AttemptResult(
        attempt=n, status=status, started=T0 + started, ended=T0 + ended, setup_s=started - setup_at,
        hosts=[HostResult(slice=s, worker_id=0, exit_code=0) for s in slices],
        first_step=first[0] if first else None, first_step_time=T0 + first[1] if first else None,
        last_step=last[0] if last else None, last_step_time=T0 + last[1] if last else None, degraded=degraded)


def record(status: str = "succeeded", slices: list[int] | None = None) -> RunRecord:
    return RunRecord(run_id="r1", cluster="c", workload=Workload(command=["true"]), slices=slices or [0],
                     budgets={}, checkpoint_dir=None, status=status, created_at=T0 - 5, updated_at=T0)


def event(i: int, kind: str, at: float, slice_index: int | None = None, **data: object) -> Event:
    return Event(i, "c", T0 + at, kind, slice_index, f"{kind} {i}", stored(kind, dict(data)))


PREEMPTED_ONCE = [
    # steps 0..10 over 10 s, preempted at 11; the checkpoint was at step 6, so 7..10 are done again
    attempt(1, setup_at=0, started=2, first=(0, 5), last=(10, 15), ended=17, status="interrupted", slices=(0, 1)),
    attempt(2, setup_at=25, started=26, first=(7, 30), last=(20, 43), ended=44, slices=(2, 1)),
]

CASES = {
    # name: (attempts, the buckets expected, in seconds)
    "one attempt": ([attempt(1, setup_at=0, started=2, first=(0, 5), last=(10, 15), ended=16)],
                    {"setup": 2, "startup": 3, "productive": 10, "wind_down": 1}),
    "preempted once": (PREEMPTED_ONCE,
                       {"setup": 3, "startup": 3, "productive": 6 + 13, "lost": 4 + 2, "waiting": 8, "restore": 4,
                        "wind_down": 1}),
    "failed before its first step": ([attempt(1, setup_at=0, started=1, first=None, last=None, ended=4,
                                              status="failed")], {"setup": 1, "startup": 3}),
    "a plain command (no steps)": ([attempt(1, setup_at=0, started=0, first=None, last=None, ended=9)],
                                   {"startup": 9}),
}


@pytest.mark.parametrize("name", CASES)
def test_buckets_split_the_wall_time(name: str) -> None:
    attempts, expected = CASES[name]
    timeline = build(record(), attempts, [], [], now=T0 + 1000)
    got = {b.name: b.seconds for b in timeline.buckets if b.seconds}
    assert got == pytest.approx(expected)
    assert sum(b.seconds for b in timeline.buckets) == pytest.approx(timeline.wall_s)
    assert [b.name for b in timeline.buckets] == list(BUCKETS)


def test_a_preempted_run_has_two_bars_its_incident_and_its_marks() -> None:
    incident = IncidentRecord(attempt=1, cause="preemption", slices=[0], detail="slice 0 PREEMPTED",
                              detected_at=T0 + 16, detect_s=1.5, recover_s=14.0, lost_steps=4,
                              phases={"stop": 1.0, "swap": 0.2}, swaps=[[0, 2]])
    events = [event(1, "spare_swapped", 18, lost=0, spare=2, slices=[1, 2], run_id="r1"),
              event(2, "preemption_notice", 14, slice_index=0),  # names no run: the run held slice 0 then
              event(3, "preemption_notice", 14, slice_index=5),  # another run's slice
              event(4, "spare_swapped", 19, lost=3, spare=4, run_id="other"),
              event(5, "attempt_started", 26, attempt=2, run_id="r1")]  # not a mark
    run = record(slices=[1, 2])
    run.result = RunResult(run_id="r1", cluster="c", status="succeeded", message="ok", hosts=[], attempts=2,
                           wall_s=44.0, incidents=[incident], attempt_log=PREEMPTED_ONCE)
    run.ledger = Ledger(attempts=PREEMPTED_ONCE, incidents=[incident])
    timeline = of_record(run, [*events], now=T0 + 1000)

    assert [(b.attempt, b.slices, b.status) for b in timeline.attempts] == [(1, [0, 1], "interrupted"),
                                                                           (2, [1, 2], "succeeded")]
    assert timeline.attempts[0].kept_until_step == 6 and timeline.attempts[1].kept_until_step == 20
    (mark,) = timeline.incidents
    assert (mark.kind, mark.detect_s, mark.recover_s, mark.lost_steps) == ("preemption", 1.5, 14.0, 4)
    assert mark.detect_start == pytest.approx(T0 + 14.5) and mark.recovered_at == pytest.approx(T0 + 30)
    assert mark.swaps == [[0, 2]]
    assert [(m.kind, m.slices) for m in timeline.marks] == [("notice", [0]), ("spare swap", [0, 1, 2])]
    assert timeline.wall_s == 44.0 and not timeline.live
    assert timeline.slices == [0, 1, 2]
    assert timeline.goodput == pytest.approx(19 / 44)


def test_a_live_run_counts_up_to_now() -> None:
    run = record(status="running")
    run.phase = Running(attempt=2, started=T0 + 26)
    run.progress = RunProgress(step=12, time=T0 + 35, loss=0.5)
    first = PREEMPTED_ONCE[0]
    timeline = build(run, [first], [], [], now=T0 + 40, phase=run.phase, progress=run.progress)

    assert timeline.live and timeline.end == T0 + 40
    assert [b.status for b in timeline.attempts] == ["interrupted", "running"]
    assert timeline.attempts[1].last_step == 12
    assert sum(b.seconds for b in timeline.buckets) == pytest.approx(40)
    assert timeline.bucket("waiting") == pytest.approx(26 - 17)


def test_a_run_that_never_started_has_no_bars() -> None:
    run = record(status="failed")
    timeline = build(run, [], [], [], now=T0 + 100)
    assert timeline.attempts == [] and timeline.wall_s == pytest.approx(5) and timeline.goodput is None


def test_each_checkpoint_is_marked_once_at_its_time_and_step() -> None:
    events = [event(1, "checkpoint_saved", 13.0, attempt=1, step=6, saved_at=T0 + 11.5, run_id="r1"),
              event(2, "checkpoint_saved", 40.0, attempt=2, step=12, saved_at=T0 + 36.0, run_id="r1"),
              event(3, "checkpoint_saved", 41.0, attempt=2, step=12, saved_at=T0 + 36.0, run_id="r1"),  # again
              event(4, "checkpoint_saved", 20.0, attempt=1, step=8, saved_at=T0 + 19.0, run_id="other")]
    timeline = build(record(), PREEMPTED_ONCE, [], events, now=T0 + 1000)
    assert [(m.kind, m.step, m.time) for m in timeline.marks] == [("checkpoint", 6, T0 + 11.5),
                                                                  ("checkpoint", 12, T0 + 36.0)]
