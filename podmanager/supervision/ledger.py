"""Arithmetic over the run's ledger: the run's result from its attempts, its goodput and
badput, and each incident as the budgets count it. The ledger's records themselves are the
run record's (state/run_results.py); the supervisor fills them in.
"""

from __future__ import annotations

from pathlib import Path

from podmanager.state.run_results import AttemptResult, IncidentRecord, RunResult
from podmanager.supervision.classify import Cause, Incident


def classified(record: IncidentRecord) -> Incident:
    """An incident of the ledger as the recovery budgets count it."""
    return Incident(Cause(record.cause), frozenset(record.slices), record.detail,
                    (record.host[0], record.host[1]) if record.host else None)


def summarize(cluster: str, run_id: str, attempts: list[AttemptResult], log_dir: Path) -> RunResult:
    """The run's result from its attempts (the recovery figures are filled in by the supervisor)."""
    final = attempts[-1]
    if final.setup_error is not None:
        message = f"run {run_id} could not start: setting up {final.setup_error.host} failed: {final.setup_error.error}"
    elif final.status == "succeeded":
        message = f"run {run_id} succeeded on {len(final.hosts)} host(s)"
    else:
        message = f"run {run_id} failed: {final.failed_host or 'the run'} {final.failure}"
    return RunResult(run_id=run_id, cluster=cluster, status=final.status, message=message, hosts=final.hosts,
                     attempts=len(attempts),
                     wall_s=final.ended - (attempts[0].started - attempts[0].setup_s),
                     attempt_log=attempts, log_dir=str(log_dir))


def badput(attempts: list[AttemptResult]) -> dict[str, float]:
    """Seconds of the run that made no step, by cause: `setup` (hosts readied before each
    attempt), `startup` (an attempt's start to its first step: imports, compilation,
    restoring a checkpoint) and `recovery` (a failed attempt's end to the next one's setup)."""
    setup = sum(a.setup_s for a in attempts)
    startup = sum(a.first_step_time - a.started for a in attempts if a.first_step_time is not None)
    recovery = sum(max(0.0, later.started - later.setup_s - earlier.ended)
                   for earlier, later in zip(attempts, attempts[1:]))
    figures = {"setup": round(setup, 3), "startup": round(startup, 3), "recovery": round(recovery, 3)}
    if any(a.degraded for a in attempts):  # only elastic runs that shrank have the figure
        figures["degraded"] = round(sum(a.ended - a.started for a in attempts if a.degraded), 3)
    return figures


def goodput(attempts: list[AttemptResult], wall_s: float) -> float | None:
    """Productive step time over wall time: the steps that count (each final step once),
    at each attempt's own pace, divided by the run's wall time."""
    if wall_s <= 0 or not any(a.first_step_time is not None for a in attempts):
        return None  # nothing reported progress (e.g. a plain command): no figure rather than 0%
    productive = 0.0
    kept_until: int | None = None  # steps after this were redone by a later attempt
    for attempt in reversed(attempts):
        if attempt.first_step is None or attempt.last_step is None or attempt.first_step_time is None:
            continue
        last = attempt.last_step if kept_until is None else min(attempt.last_step, kept_until)
        steps = last - attempt.first_step + 1
        if attempt.last_step > attempt.first_step and attempt.last_step_time is not None:
            pace = (attempt.last_step_time - attempt.first_step_time) / (attempt.last_step - attempt.first_step)
            productive += max(0, steps) * pace
        kept_until = attempt.first_step - 1
    return min(1.0, productive / wall_s)
