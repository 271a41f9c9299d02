"""The run's ledger: every incident with its timings, the run's result, and its goodput.

Pure data and arithmetic over attempt results; the supervisor fills it in.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from podmanager.attempts.results import AttemptResult, HostResult, SetupError
from podmanager.supervision.classify import Cause, Incident


@dataclass
class IncidentRecord:
    """One entry of the run's ledger."""

    attempt: int
    cause: str
    slices: list[int]
    detail: str
    detected_at: float
    detect_s: float | None  # from the last healthy check to detection: how late we could have been
    recover_s: float | None  # detection to the first step of the next attempt
    lost_steps: int | None
    phases: dict[str, float]  # seconds per phase: stop, delete, create, join, relaunch, first_step
    host: list[int] | None = None  # [slice, worker] of the host that failed first (program and infra failures)
    swaps: list[list[int]] | None = None  # [lost slice, the hot spare that took its place], one per swap

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "slice": self.slices[0] if self.slices else None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "IncidentRecord":
        return cls(**{k: v for k, v in data.items() if k != "slice"})

    def classified(self) -> Incident:
        """The incident as the recovery budgets count it."""
        return Incident(Cause(self.cause), frozenset(self.slices), self.detail,
                        (self.host[0], self.host[1]) if self.host else None)


@dataclass
class Ledger:
    """What happened to a run so far, each thing once: every attempt's result and every
    incident. The budgets are counted from the incidents; the run's record keeps this."""

    attempts: list[AttemptResult] = field(default_factory=list)
    incidents: list[IncidentRecord] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"attempts": [asdict(a) for a in self.attempts], "incidents": [asdict(i) for i in self.incidents]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Ledger":
        # A record from before kept the budgets' view twice, as "causes": the incidents say it all.
        return cls([AttemptResult.from_dict(a) for a in data.get("attempts", [])],
                   [IncidentRecord.from_dict(i) for i in data.get("incidents", [])])


@dataclass
class RunResult:
    run_id: str
    cluster: str
    status: str  # succeeded | failed | cancelled
    message: str
    hosts: list[HostResult]  # the last attempt's
    metrics: dict[str, Any]  # first_step, last_step, first_loss, last_loss
    attempts: int
    preemptions: int = 0
    failures: int = 0
    hangs: int = 0
    goodput: float | None = None  # productive step time / wall time
    # Seconds lost, by cause: setting hosts up, programs starting (to their first step), recovering.
    badput: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0
    incidents: list[dict[str, Any]] = field(default_factory=list)
    attempt_log: list[AttemptResult] = field(default_factory=list)
    log_dir: str = ""
    setup_error: SetupError | None = None  # the run could not be set up (bad input): nothing ran

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def without_attempts(cls, run_id: str, cluster: str, status: str, message: str, log_dir: str = "") -> "RunResult":
        """The result of a run that ended before any attempt of it ran."""
        return cls(run_id, cluster, status, message, [],
                   {"first_step": None, "last_step": None, "first_loss": None, "last_loss": None}, 0,
                   log_dir=log_dir)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunResult":
        error = data.get("setup_error")
        return cls(**{**data, "hosts": [HostResult(**h) for h in data["hosts"]],
                      "attempt_log": [AttemptResult.from_dict(a) for a in data["attempt_log"]],
                      "setup_error": SetupError(**error) if error else None})


def summarize(cluster: str, run_id: str, attempts: list[AttemptResult], log_dir: Path) -> RunResult:
    """The run's result from its attempts (the recovery figures are filled in by the supervisor)."""
    final = attempts[-1]
    metrics = {
        "first_step": next((a.first_step for a in attempts if a.first_step is not None), None),
        "last_step": final.last_step,
        "first_loss": next((a.first_loss for a in attempts if a.first_loss is not None), None),
        "last_loss": final.last_loss,
    }
    if final.setup_error is not None:
        message = f"run {run_id} could not start: setting up {final.setup_error.host} failed: {final.setup_error.error}"
    elif final.status == "succeeded":
        message = f"run {run_id} succeeded on {len(final.hosts)} host(s)"
    else:
        message = f"run {run_id} failed: {final.failed_host or 'the run'} {final.failure}"
    return RunResult(run_id=run_id, cluster=cluster, status=final.status, message=message, hosts=final.hosts,
                     metrics=metrics, attempts=len(attempts),
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
    return {"setup": round(setup, 3), "startup": round(startup, 3), "recovery": round(recovery, 3)}


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
