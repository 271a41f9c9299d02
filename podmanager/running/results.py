"""What an attempt of a run leaves behind, as typed records: each host's exit, the attempt's
outcome and progress. Kept apart from the attempt runner so that reading a run's record
(`runs`, `attach`, the ledger) does not load Ray."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from podmanager.core.records import HostSlot

OutputPrinter = Callable[[HostSlot, str], None]


@dataclass
class HostResult:
    slice: int
    worker_id: int
    exit_code: int | None
    lost: str | None = None


@dataclass
class AttemptResult:
    attempt: int
    status: str  # succeeded | failed | interrupted
    started: float
    ended: float
    hosts: list[HostResult]
    failed_host: str | None = None  # "slice-0/host-1": the first to fail
    failure: str | None = None  # what happened to it
    last_lines: list[str] = field(default_factory=list)
    first_step: int | None = None
    last_step: int | None = None
    first_loss: float | None = None
    last_loss: float | None = None
    first_step_time: float | None = None  # unix time the program reported its first step
    last_step_time: float | None = None
    detected_at: float | None = None  # when the failure was seen (before the survivors were stopped)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "AttemptResult":
        return cls(**{**data, "hosts": [HostResult(**h) for h in data["hosts"]]})
