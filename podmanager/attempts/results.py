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
class SetupError:
    """Why a run could not be set up on a host: bad input (a requirement that cannot be
    installed, a program that is not there), never the program's own failure."""

    host: str  # "slice-0/host-1"
    error: str
    lines: list[str] = field(default_factory=list)  # the installer's own words


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
    setup_s: float = 0.0  # setting the hosts up before `started` (code, requirements, program check)
    setup_error: SetupError | None = None
    setup_installed: list[str] = field(default_factory=list)  # hosts that installed for it (the rest reused)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "AttemptResult":
        error = data.get("setup_error")
        return cls(**{**data, "hosts": [HostResult(**h) for h in data["hosts"]],
                      "setup_error": SetupError(**error) if error else None})
