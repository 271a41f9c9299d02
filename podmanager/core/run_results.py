"""What a run leaves behind: each attempt's result (each host's exit), each incident, the
ledger of both, its latest progress, and the run's result once it has ended; and what a run's
status says (active, finished).

Pydantic models, stored as JSON in the run's row (`state/run_records.py`) and read back by any
process: the supervisor carrying on, `runs`, `attach`, a service's handle; carried over the
channel inside a run's status (`channel/run_status.py`). Here, in `core/`, so the store, the
wire and the laptop's client share one declaration. A field dropped since is ignored when an
older record is read.
"""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, computed_field

ACTIVE = ("starting", "running", "recovering")  # a supervisor is (or will be) looking after it
FINISHED = ("succeeded", "failed", "cancelled")
SERVING = "serving"  # a service's status until it stops (`state/services.py::ServiceRecord`)


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore")  # a record from before may carry a field dropped since


class HostResult(_Record):
    slice: int
    worker_id: int
    exit_code: int | None
    lost: str | None = None


class SetupError(_Record):
    """Why a run could not be set up on a host: bad input (a requirement that cannot be
    installed, a program that is not there), never the program's own failure."""

    host: str  # "slice-0/host-1"
    error: str
    lines: list[str] = Field(default_factory=list)  # the installer's own words


class AttemptResult(_Record):
    attempt: int
    status: str  # succeeded | failed | interrupted
    started: float
    ended: float
    hosts: list[HostResult]
    failed_host: str | None = None  # "slice-0/host-1": the first to fail
    failure: str | None = None  # what happened to it
    last_lines: list[str] = Field(default_factory=list)
    first_step: int | None = None
    last_step: int | None = None
    first_loss: float | None = None
    last_loss: float | None = None
    first_step_time: float | None = None  # unix time the program reported its first step
    last_step_time: float | None = None
    detected_at: float | None = None  # when the failure was seen (before the survivors were stopped)
    setup_s: float = 0.0  # setting the hosts up before `started` (code, requirements, program check)
    setup_error: SetupError | None = None
    setup_installed: list[str] = Field(default_factory=list)  # hosts that installed for it (the rest reused)
    # Hosts the run was set up on before (an earlier attempt there, or a hot spare prepared for it).
    setup_already: list[str] = Field(default_factory=list)
    degraded: bool = False  # ran on fewer slices than the run's (an elastic run shrunk after a loss)
    checkpoint_step: int | None = None  # the newest checkpoint its program said was final (`Checkpointer.save`)
    checkpoint_time: float | None = None


class IncidentRecord(_Record):
    """One incident of the run: in its ledger, and in its result."""

    attempt: int
    cause: str  # supervision/classify.py::Cause's value
    slices: list[int]
    detail: str
    detected_at: float
    detect_s: float | None  # from the last healthy check to detection: how late we could have been
    recover_s: float | None  # detection to the first step of the next attempt
    lost_steps: int | None
    phases: dict[str, float]  # seconds per phase: stop, swap, delete, create, join, setup (a host set the run up), first_step
    host: list[int] | None = None  # [slice, worker] of the host that failed first (program and infra failures)
    swaps: list[list[int]] | None = None  # [lost slice, the hot spare that took its place], one per swap


class Ledger(_Record):
    """What happened to a run so far, each thing once: every attempt's result and every
    incident. The budgets are counted from the incidents. (A record from before also kept
    the budgets' view, as "causes": ignored, the incidents say it all.)"""

    attempts: list[AttemptResult] = Field(default_factory=list)
    incidents: list[IncidentRecord] = Field(default_factory=list)


class RunMetrics(_Record):
    """The run's steps and loss, from its attempts: the first of the earliest attempt that
    reported one, the last of the final attempt."""

    first_step: int | None = None
    last_step: int | None = None
    first_loss: float | None = None
    last_loss: float | None = None


class RunResult(_Record):
    run_id: str
    cluster: str
    status: str  # succeeded | failed | cancelled
    message: str
    hosts: list[HostResult]  # the last attempt's
    attempts: int
    preemptions: int = 0
    failures: int = 0
    hangs: int = 0
    goodput: float | None = None  # productive step time / wall time
    # Seconds lost, by cause: setting hosts up, programs starting (to their first step), recovering,
    # and `degraded`: running on fewer slices than the run's (an elastic run shrunk).
    badput: dict[str, float] = Field(default_factory=dict)
    wall_s: float = 0.0
    incidents: list[IncidentRecord] = Field(default_factory=list)
    attempt_log: list[AttemptResult] = Field(default_factory=list)
    log_dir: str = ""
    setup_error: SetupError | None = None  # the run could not be set up (bad input): nothing ran

    @computed_field  # type: ignore[prop-decorator]
    @property
    def metrics(self) -> RunMetrics:
        """Worked out from `attempt_log` (not stored twice); still in the JSON for its readers."""
        attempts = self.attempt_log
        final = attempts[-1] if attempts else None
        return RunMetrics(
            first_step=next((a.first_step for a in attempts if a.first_step is not None), None),
            last_step=final.last_step if final else None,
            first_loss=next((a.first_loss for a in attempts if a.first_loss is not None), None),
            last_loss=final.last_loss if final else None,
        )

    @classmethod
    def without_attempts(cls, run_id: str, cluster: str, status: str, message: str, log_dir: str = "",
                         attempts: int = 0) -> "RunResult":
        """The result of a run that ended before any attempt of it ran (or with none known)."""
        return cls(run_id=run_id, cluster=cluster, status=status, message=message, hosts=[], attempts=attempts,
                   log_dir=log_dir)


class RunProgress(_Record):
    """The run's latest step as the supervisor last saved it (the step every host reached)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    step: int | None = None
    time: float | None = None
    loss: float | None = None
    steps_per_s: float | None = None


class Ended(Protocol):
    """What `final_result` reads of a run: its row (`state/run_records.py::RunRecord`) or its
    status as the channel carries it (`channel/run_status.py::RunStatus`)."""

    @property
    def run_id(self) -> str: ...

    @property
    def cluster(self) -> str: ...

    @property
    def status(self) -> str: ...

    @property
    def attempt(self) -> int: ...

    @property
    def result(self) -> RunResult | None: ...


def final_result(run: Ended) -> RunResult:
    """A finished run's result. A run ended without one (marked cancelled by a teardown
    whose supervisor was gone) gets one that says only how it ended."""
    if run.result is not None:
        return run.result
    return RunResult.without_attempts(run.run_id, run.cluster, run.status, f"run {run.run_id} {run.status}",
                                      attempts=run.attempt)
