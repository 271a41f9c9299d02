"""The typed parts of a run's durable record: where its supervisor is (the phase) and the
supervisor's own process (its progress is `core/run_results.py::RunProgress`).

The phase is what a restarted supervisor carries on from (supervision/supervisor.py
matches on it in one place):

    Launching(attempt) -> Running(attempt) -> Replacing(next attempt, slices) -> Launching(...)
                                           -> Launching(next attempt, on_slices)  (elastic: shrunk)
                                           -> Finished

An elastic run (`Workload.min_slices`) that lost a slice with no spare ready launches its next
attempt on the slices left (`on_slices`) while the lost one is made again in the background,
and launches on all of them again (`on_slices` None) once it is ready.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")  # a field dropped since is no error


class Launching(_Record):
    """Attempt `attempt` is being set up and started on every host. `started` and
    `log_base` (each host's log size before it) are set once the launch began, so a
    restarted supervisor can tell a launch cut short from one not yet begun."""

    name: Literal["launching"] = "launching"
    attempt: int = 0
    started: float | None = None
    log_base: dict[str, int] = Field(default_factory=dict)
    on_slices: list[int] | None = None  # fewer than the run's (an elastic run shrunk); None: all of them


class Running(_Record):
    """Attempt `attempt` runs on every host (re-attachable after a supervisor restart)."""

    name: Literal["running"] = "running"
    attempt: int
    started: float | None = None
    log_base: dict[str, int] = Field(default_factory=dict)
    on_slices: list[int] | None = None  # as `Launching.on_slices`


class Replacing(_Record):
    """These slices are being replaced (`reason`) before attempt `attempt`; `deleted` once
    their delete is done, so a restart only creates what is missing."""

    name: Literal["replacing"] = "replacing"
    attempt: int
    slices: list[int]
    reason: str
    deleted: bool = False


class Finished(_Record):
    """The run is over; its status and result are in the record."""

    name: Literal["finished"] = "finished"


RunPhase = Annotated[Union[Launching, Running, Replacing, Finished], Field(discriminator="name")]
PHASE = TypeAdapter(RunPhase)


class SupervisorProcess(_Record):
    """The supervisor looking after the run: its process and how often it has started
    (more than once: Ray restarted it and it carried on from the phase)."""

    pid: int | None = None
    started_at: float | None = None
    starts: int = 0
