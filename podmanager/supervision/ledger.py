"""The run's ledger: every incident with its timings, the run's result, and its goodput.

Pure data and arithmetic over attempt results; the supervisor fills it in.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from podmanager.running.results import AttemptResult, HostResult


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

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "slice": self.slices[0] if self.slices else None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "IncidentRecord":
        return cls(**{k: v for k, v in data.items() if k != "slice"})


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
    wall_s: float = 0.0
    incidents: list[dict[str, Any]] = field(default_factory=list)
    attempt_log: list[AttemptResult] = field(default_factory=list)
    log_dir: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunResult":
        return cls(**{**data, "hosts": [HostResult(**h) for h in data["hosts"]],
                      "attempt_log": [AttemptResult.from_dict(a) for a in data["attempt_log"]]})


def summarize(cluster: str, run_id: str, attempts: list[AttemptResult], log_dir: Path) -> RunResult:
    """The run's result from its attempts (the recovery figures are filled in by the supervisor)."""
    final = attempts[-1]
    metrics = {
        "first_step": next((a.first_step for a in attempts if a.first_step is not None), None),
        "last_step": final.last_step,
        "first_loss": next((a.first_loss for a in attempts if a.first_loss is not None), None),
        "last_loss": final.last_loss,
    }
    if final.status == "succeeded":
        message = f"run {run_id} succeeded on {len(final.hosts)} host(s)"
    else:
        message = f"run {run_id} failed: {final.failed_host or 'the run'} {final.failure}"
    return RunResult(run_id=run_id, cluster=cluster, status=final.status, message=message, hosts=final.hosts,
                     metrics=metrics, attempts=len(attempts), wall_s=final.ended - attempts[0].started,
                     attempt_log=attempts, log_dir=str(log_dir))


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
