"""One run's timeline, built from what its record and the event log already hold: each attempt
as a bar over its slices, each incident with its detect and recover phases, the swaps, shrinks
and grow-backs and notices as marks, and where every second of the run's wall time went.

Pure (no Ray, no JAX, no I/O): the dashboard's server and a standalone HTML file
(`podmanager timeline RUN --html FILE`) both draw this one model.

The wall time is the ledger's (`RunResult.wall_s`): from the first attempt's setup to the last
attempt's end (to `now` while the run goes on). It is cut into buckets that never overlap, so
they sum to it:

- `setup`: hosts readied before each attempt (code, requirements, installs);
- `startup`: the first attempt's start to its first step (imports, compilation);
- `restore`: a later attempt's start to its first step (start-up again and the checkpoint
  restored: the record does not tell the two apart);
- `waiting`: between one attempt's end and the next one's setup (stopping, a spare swapped
  or a slice made again, hosts joining);
- `lost`: progress lost to the disruption: steps a later attempt did again, and an ended
  attempt's time after its last step report;
- `productive`: the steps that count, each once;
- `wind_down`: a succeeded attempt's time after its last step (the final save, exiting).

An attempt that ended before any step spent all its time in `startup` (or `restore`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Protocol

from pydantic import BaseModel, Field

from podmanager.core.event_data import EventData
from podmanager.core.run_results import AttemptResult, IncidentRecord
from podmanager.state.run_state import Launching, Running

if TYPE_CHECKING:
    from podmanager.state.run_records import RunRecord

# The buckets in the order the breakdown lists them, with what the page calls them.
BUCKETS: dict[str, str] = {
    "productive": "productive steps",
    "setup": "setup and installs",
    "startup": "program start-up",
    "restore": "restart and checkpoint restore",
    "waiting": "waiting for slices",
    "lost": "progress lost to the disruption",
    "wind_down": "wind-down after the last step",
}
# The incident causes (supervision/classify.py::Cause's values) as the page names them.
INCIDENT_KINDS = {"preemption": "preemption", "program-failure": "failure", "hang": "hang",
                  "infrastructure": "failure", "supervisor-restart": "supervisor restart"}
# The events of the log that become marks on the time axis, by kind.
MARK_KINDS = {"preemption_notice": "notice", "spare_swapped": "spare swap", "run_shrunk": "shrink",
              "run_grew": "grow-back", "slices_replaced": "slices replaced", "supervisor_restarted": "supervisor restart",
              "slice_preempted": "slice preempted", "slice_unwell": "slice unwell", "checkpoint_saved": "checkpoint"}


class EventLike(Protocol):
    """What the timeline reads of an event (`state/store.py::Event`)."""

    id: int
    time: float
    kind: str
    slice_index: int | None
    message: str
    data: EventData


class RunLike(Protocol):
    """What the timeline reads of a run's record (`state/run_records.py::RunRecord`)."""

    run_id: str
    cluster: str
    status: str
    attempt: int
    slices: list[int]
    created_at: float
    updated_at: float


class AttemptBar(BaseModel):
    attempt: int
    status: str  # succeeded | failed | interrupted | running
    slices: list[int]
    setup_start: float
    started: float
    first_step_time: float | None = None
    last_step_time: float | None = None
    ended: float  # `now` for the running attempt
    first_step: int | None = None
    last_step: int | None = None
    first_loss: float | None = None
    last_loss: float | None = None
    kept_until_step: int | None = None  # its steps after this one were done again by a later attempt
    degraded: bool = False  # on fewer slices than the run's (an elastic run shrunk)
    failure: str | None = None


class IncidentMark(BaseModel):
    attempt: int
    cause: str
    kind: str  # preemption | failure | hang | supervisor restart
    slices: list[int]
    detail: str
    detected_at: float
    detect_s: float | None
    recover_s: float | None
    detect_start: float | None  # the last healthy check: `detected_at - detect_s`
    recovered_at: float | None  # the next attempt's first step: `detected_at + recover_s`
    lost_steps: int | None
    phases: dict[str, float]
    swaps: list[list[int]] = Field(default_factory=list)


class Mark(BaseModel):
    kind: str  # one of MARK_KINDS' values
    time: float
    slices: list[int] = Field(default_factory=list)
    message: str
    event_id: int
    step: int | None = None  # a checkpoint's step


class Bucket(BaseModel):
    name: str
    label: str
    seconds: float


class RunTimeline(BaseModel):
    run_id: str
    cluster: str
    status: str
    submitted: float
    start: float  # the first attempt's setup (the submission while none began)
    end: float  # the last attempt's end; `now` while the run goes on
    wall_s: float
    live: bool
    slices: list[int]  # every slice any attempt ran on, and the run's own now
    attempts: list[AttemptBar]
    incidents: list[IncidentMark]
    marks: list[Mark]
    buckets: list[Bucket]
    goodput: float | None  # productive over wall time
    message: str = ""

    def bucket(self, name: str) -> float:
        return next(b.seconds for b in self.buckets if b.name == name)


def build(run: RunLike, attempts: list[AttemptResult], incidents: list[IncidentRecord], events: Iterable[EventLike], *,
          now: float, phase: object = None, progress: object = None, result_wall_s: float | None = None,
          message: str = "") -> RunTimeline:
    """The run's timeline from its ledger (`attempts`, `incidents`), its events, and, while it
    runs, the attempt in flight (`phase`: `Launching`/`Running`; `progress`: `RunProgress`)."""
    live = run.status not in ("succeeded", "failed", "cancelled")
    bars = [_bar(a) for a in attempts]
    running = _running_bar(run, phase, progress, now) if live else None
    if running is not None and all(b.attempt != running.attempt for b in bars):
        bars.append(running)
    _mark_redone(bars)
    start = bars[0].setup_start if bars else run.created_at
    if live:
        end = max(now, start)
    elif bars:
        end = bars[-1].ended
    else:
        end = max(run.updated_at, start)
    wall = end - start
    if not live and result_wall_s is not None and attempts:
        wall = result_wall_s  # the ledger's own figure (the same ends, as the record rounded them)
    buckets = _buckets(bars, start, end)
    slices = sorted({s for b in bars for s in b.slices} | set(run.slices))
    run_events = sorted((e for e in events if _belongs(e, run.run_id, set(slices), start, end)),
                        key=lambda e: (e.time, e.id))
    return RunTimeline(
        run_id=run.run_id, cluster=run.cluster, status=run.status, submitted=run.created_at, start=start, end=end,
        wall_s=wall, live=live, slices=slices, attempts=bars, incidents=[_incident(i) for i in incidents],
        marks=_marks(run_events),
        buckets=[Bucket(name=n, label=BUCKETS[n], seconds=round(buckets[n], 3)) for n in BUCKETS],
        goodput=(buckets["productive"] / wall) if wall > 0 and any(b.first_step is not None for b in bars) else None,
        message=message)


def _bar(attempt: AttemptResult) -> AttemptBar:
    return AttemptBar(
        attempt=attempt.attempt, status=attempt.status, slices=sorted({h.slice for h in attempt.hosts}),
        setup_start=attempt.started - attempt.setup_s, started=attempt.started,
        first_step_time=attempt.first_step_time, last_step_time=attempt.last_step_time, ended=attempt.ended,
        first_step=attempt.first_step, last_step=attempt.last_step, first_loss=attempt.first_loss,
        last_loss=attempt.last_loss, degraded=attempt.degraded, failure=attempt.failure)


def _running_bar(run: RunLike, phase: object, progress: object, now: float) -> AttemptBar | None:
    """The attempt in flight, from the record's phase and latest progress (None between attempts)."""
    if not isinstance(phase, (Launching, Running)) or phase.started is None:
        return None
    step = getattr(progress, "step", None)
    step_time = getattr(progress, "time", None)
    if step_time is not None and step_time < phase.started:
        step, step_time = None, None  # the previous attempt's progress
    slices = sorted(phase.on_slices if phase.on_slices is not None else run.slices)
    return AttemptBar(attempt=phase.attempt, status="running", slices=slices, setup_start=phase.started,
                      started=phase.started, first_step_time=None, last_step_time=step_time, ended=max(now, phase.started),
                      last_step=step, last_loss=getattr(progress, "loss", None),
                      degraded=phase.on_slices is not None and len(phase.on_slices) < len(run.slices))


def _mark_redone(bars: list[AttemptBar]) -> None:
    """Each attempt's last step that counts: a later attempt that began at step N did every step
    from N on again (as `supervision/ledger.py::goodput` counts them)."""
    kept: int | None = None
    for bar in reversed(bars):
        if bar.first_step is None or bar.last_step is None:
            continue
        bar.kept_until_step = bar.last_step if kept is None else min(bar.last_step, kept)
        kept = bar.first_step - 1


def _buckets(bars: list[AttemptBar], start: float, end: float) -> dict[str, float]:
    found = dict.fromkeys(BUCKETS, 0.0)
    cursor = start  # the time accounted for so far: the buckets never overlap
    for index, bar in enumerate(bars):
        first_attempt = index == 0

        def take(bucket: str, until: float) -> None:
            nonlocal cursor
            until = min(max(until, cursor), end)
            found[bucket] += until - cursor
            cursor = until

        take("waiting", bar.setup_start)
        take("setup", bar.started)
        first_step = bar.first_step_time
        if first_step is None and bar.status == "running" and bar.last_step_time is not None:
            first_step = bar.started  # in flight: its start-up is not known apart from its steps
        if first_step is None:
            take("startup" if first_attempt else "restore", bar.ended)
            continue
        take("startup" if first_attempt else "restore", first_step)
        last = bar.last_step_time if bar.last_step_time is not None else first_step
        if bar.status != "running" and bar.first_step is not None and bar.last_step is not None \
                and bar.kept_until_step is not None and bar.last_step > bar.first_step:
            share = (bar.kept_until_step - bar.first_step) / (bar.last_step - bar.first_step)
            kept_time = first_step + max(0.0, min(1.0, share)) * (last - first_step)
        else:
            kept_time = last
        take("productive", kept_time)
        take("lost", last)
        if bar.status == "running":
            take("productive", bar.ended)  # steps since the last report: counted once it reports them
        else:
            take("wind_down" if bar.status == "succeeded" else "lost", bar.ended)
    if bars:
        found["waiting"] += max(0.0, end - cursor)  # a live run between attempts
    return found


def _incident(record: IncidentRecord) -> IncidentMark:
    detect_start = record.detected_at - record.detect_s if record.detect_s is not None else None
    recovered = record.detected_at + record.recover_s if record.recover_s is not None else None
    return IncidentMark(attempt=record.attempt, cause=record.cause, kind=INCIDENT_KINDS.get(record.cause, record.cause),
                        slices=sorted(record.slices), detail=record.detail, detected_at=record.detected_at,
                        detect_s=record.detect_s, recover_s=record.recover_s, detect_start=detect_start,
                        recovered_at=recovered, lost_steps=record.lost_steps, phases=dict(record.phases),
                        swaps=list(record.swaps or []))


def _belongs(event: EventLike, run_id: str, slices: set[int], start: float, end: float) -> bool:
    """The run's own events, and a notice for one of its slices while it ran (a notice names no run)."""
    owner = event.data.run_id
    if owner is not None:
        return owner == run_id
    return event.slice_index is not None and event.slice_index in slices and start <= event.time <= end


def _marks(events: list[EventLike]) -> list[Mark]:
    """The marks in time order; a checkpoint once (a supervisor started again may record it again)."""
    found, checkpoints = [], set()
    for event in events:
        if event.kind not in MARK_KINDS:
            continue
        mark = _mark(event)
        if mark.kind == "checkpoint":
            key = (event.data.as_json().get("attempt"), mark.step)
            if key in checkpoints:
                continue
            checkpoints.add(key)
        found.append(mark)
    return sorted(found, key=lambda m: (m.time, m.event_id))


def _mark(event: EventLike) -> Mark:
    data = event.data.as_json()  # the fields as the page shows them, whichever kind holds them
    step = data.get("step") if isinstance(data.get("step"), int) else None
    saved_at = data.get("saved_at")
    at = float(saved_at) if event.kind == "checkpoint_saved" and isinstance(saved_at, (int, float)) else event.time
    slices = [event.slice_index] if event.slice_index is not None else []
    for key in ("lost", "spare", "slices"):
        value = data.get(key)
        if isinstance(value, int):
            slices.append(value)
        elif isinstance(value, list):
            slices.extend(v for v in value if isinstance(v, int))
    return Mark(kind=MARK_KINDS[event.kind], time=at, slices=sorted(set(slices)), message=event.message,
                event_id=event.id, step=step if event.kind == "checkpoint_saved" else None)


def of_record(run: "RunRecord", events: Iterable[EventLike], *, now: float) -> RunTimeline:
    """The timeline of a run as its record holds it (finished or not)."""
    result = run.result
    attempts = result.attempt_log if result is not None and result.attempt_log else run.ledger.attempts
    incidents = result.incidents if result is not None and result.incidents else run.ledger.incidents
    return build(run, attempts, incidents, events, now=now, phase=run.phase, progress=run.progress,
                 result_wall_s=result.wall_s if result is not None else None,
                 message=result.message if result is not None else "")
