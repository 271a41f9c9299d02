"""What the controller and a host's agent say to each other, declared once for both ends.

The controller (`attempts/gang.py`, `supervision/spare_preparation.py`) sends a `RunSetup`
to ready a run on a host and a `HostLaunch` to start one attempt's process there; the agent
(`vm/agent.py`, its machinery `vm/workload_runs.py`) takes them as they are, typed, and
answers with a `PollReply` per poll and a `HeldRun` per status read (a setup's answer is
`vm/environments.py::HostSetup`, made where the setup happens). The records travel through
Ray as Python objects; `version` lets an agent of other software refuse a record it would
misread instead of guessing.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from podmanager.core.workload import Workload
from podmanager.runtime import contract

HOST_WIRE_VERSION = 1


class RunSetup(BaseModel):
    """A run as a host sets it up: its id, its workload, and which code it ships (the digest
    of the zip whose bytes travel beside this record; None when it ships none)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int = HOST_WIRE_VERSION
    run_id: str = Field(min_length=1)
    workload: Workload
    code_digest: str | None = None


class HostLaunch(BaseModel):
    """One attempt's process started on a host: the run, the attempt it belongs to, and the
    process's launch environment (`attempts/launch.py::launch_envs`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int = HOST_WIRE_VERSION
    run: RunSetup
    attempt: int = Field(ge=0)
    env: dict[str, str] = Field(default_factory=dict)

    @property
    def run_id(self) -> str:
        return self.run.run_id


class WireVersionError(ValueError):
    """A record of another version of the host wire than this agent's."""


def check_version(record: RunSetup | HostLaunch) -> None:
    """Refuse a record this side would misread: its sender runs other podmanager software."""
    versions = {record.version} | ({record.run.version} if isinstance(record, HostLaunch) else set())
    if versions != {HOST_WIRE_VERSION}:
        raise WireVersionError(f"{type(record).__name__} of host-wire version {max(versions)}; this agent speaks "
                               f"version {HOST_WIRE_VERSION}: the controller and the hosts run different "
                               "podmanager software (a boot installs the controller's)")


@dataclass(frozen=True)
class PollReply:
    """One poll of a run's process on a host (`HostRuns.poll`)."""

    running: bool
    exit_code: int | None
    pid: int
    output: bytes  # as the program wrote it, from the asked offset, in whole lines
    offset: int  # where the next poll reads from
    left: int  # bytes written after `offset`, not in this reply: ask again without holding
    progress: contract.ProgressRecord | None  # the last step the program reported
    first_progress: contract.ProgressRecord | None  # the first step it reported in this attempt
    tail: tuple[str, ...] = ()  # once the process has exited: the last lines of all its output
    asked_to_stop: bool = False  # the agent sent it SIGTERM (a notice's, or a stop's)


@dataclass(frozen=True)
class HeldRun:
    """Which attempt of a run a host holds and how its process is (`HostRuns.describe`):
    what a restarted supervisor re-attaches by."""

    attempt: int
    running: bool
    exit_code: int | None
    pid: int
