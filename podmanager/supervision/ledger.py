"""Arithmetic over the run's ledger: the run's result from its attempts, its goodput and
badput, and each incident as the budgets count it. The ledger's records themselves are the
run record's (core/run_results.py); the supervisor fills them in.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from podmanager.core.run_results import AttemptResult, IncidentRecord, RunResult
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


def incident_record(attempt: int, incident: Incident, detected_at: float, healthy_until: float | None,
                    phases: dict[str, float]) -> IncidentRecord:
    """The ledger's record of an incident as it is seen (its recovery is filled in by `close`)."""
    return IncidentRecord(
        attempt=attempt, cause=incident.cause.value, slices=sorted(incident.slices), detail=incident.detail,
        # The last healthy look can come after the failure was seen (a check in the same beat): 0, not negative.
        detected_at=detected_at, detect_s=max(0.0, detected_at - healthy_until) if healthy_until else None,
        recover_s=None, lost_steps=None, phases=phases, host=list(incident.host) if incident.host else None,
    )


def pending(incidents: list[IncidentRecord], attempt: int) -> IncidentRecord | None:
    """The last incident if `attempt` is the one after it and its recovery is not filled in yet."""
    last = incidents[-1] if incidents else None
    if last is not None and last.recover_s is None and last.attempt == attempt - 1:
        return last
    return None


def close(record: IncidentRecord, result: AttemptResult, earlier: list[AttemptResult]) -> None:
    """Fill in what the attempt after the incident tells: when it made its first step, from
    where (`earlier`: the attempts before it, the incident's among them)."""
    previous = next((a for a in reversed(earlier) if a.attempt == record.attempt), None)
    if result.first_step_time is not None:
        record.recover_s = result.first_step_time - record.detected_at
        record.phases["first_step"] = result.first_step_time - result.started
    if len(result.setup_already) < len(result.hosts):  # some host had the run to set up (not a prepared spare)
        record.phases["setup"] = result.setup_s
    if result.first_step is not None and previous is not None and previous.last_step is not None:
        record.lost_steps = max(0, previous.last_step - (result.first_step - 1))


def restart_record(attempt: int, now: float) -> IncidentRecord:
    """The incident of a supervisor started again on an unfinished run (no budget pays for it)."""
    return IncidentRecord(
        attempt=attempt, cause=Cause.SUPERVISOR.value, slices=[],
        detail="the run's supervisor was lost (its process, or the Ray head when the controller crashed or "
               "restarted) and started again from the run's record", detected_at=now, detect_s=None,
        recover_s=None, lost_steps=None, phases={})


def run_result(cluster: str, run_id: str, status: str, reason: str | None, attempts: list[AttemptResult],
               incidents: list[IncidentRecord], log_dir: Path) -> RunResult:
    """The run's result as it ends with `status` (`reason`: why it stopped, if it did)."""
    if attempts:
        result = summarize(cluster, run_id, attempts, log_dir)
    else:
        result = RunResult.without_attempts(run_id, cluster, status, f"run {run_id} never started", str(log_dir))
    counts = Counter(Cause(i.cause) for i in incidents)
    result.status = status
    result.preemptions = counts[Cause.PREEMPTION]
    result.failures = counts[Cause.PROGRAM] + counts[Cause.INFRASTRUCTURE]
    result.hangs = counts[Cause.HANG]
    result.goodput = goodput(attempts, result.wall_s)
    result.badput = badput(attempts)
    result.setup_error = attempts[-1].setup_error if attempts else None
    result.incidents = list(incidents)
    if status == "cancelled":
        result.message = f"run {run_id} was cancelled"
    elif reason:
        result.message = f"{result.message}; {reason}"
    return result
