"""An attempt's progress from its hosts' progress records: the one rule that the attempt's
result (the run's summary), the run's record (`runs`) and the hang check all read steps by."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Protocol

from podmanager.runtime.contract import ProgressRecord


class HostProgress(Protocol):
    """What one host last said of its progress (a gang's `HostState`, an agent's `PollReply`)."""

    @property
    def first_progress(self) -> ProgressRecord | None: ...

    @property
    def progress(self) -> ProgressRecord | None: ...


@dataclass(frozen=True)
class AttemptProgress:
    first: ProgressRecord | None  # where the attempt started stepping
    latest: ProgressRecord | None  # the step every host has reached
    done: bool = False  # a host's last record says the program has finished its work
    total_steps: int | None = None  # the step count the program declared (the largest any host did)
    checkpoint: tuple[int, float] | None = None  # (step, time) of the newest checkpoint any host said was final

    @property
    def steps_per_s(self) -> float | None:
        first, latest = self.first, self.latest
        if first is None or latest is None or latest.step <= first.step or latest.time <= first.time:
            return None
        return (latest.step - first.step) / (latest.time - first.time)


def combine(hosts: Iterable[HostProgress]) -> AttemptProgress:
    """The attempt's first step (the earliest any host reported) and latest step (the lowest of
    the hosts' latest). A step counts when every host has made it: the hosts step together
    through their collectives, so the job is where its slowest host is; one that is ahead has
    not finished that step for the job. Hosts that reported nothing are left out (a program may
    report from one process only). One host saying the program is done, or declaring its step
    count, speaks for the job: the program may say so from process 0 only."""
    heard = list(hosts)
    firsts = [h.first_progress for h in heard if h.first_progress is not None]
    latests = [h.progress for h in heard if h.progress is not None]
    totals = [r.total_steps for r in latests if r.total_steps is not None]
    # A checkpoint is collective: once one host says it is final, it is the job's.
    saved = [(r.checkpoint_step, r.checkpoint_time) for r in latests
             if r.checkpoint_step is not None and r.checkpoint_time is not None]
    return AttemptProgress(first=min(firsts, key=lambda r: r.step, default=None),
                           latest=min(latests, key=lambda r: r.step, default=None),
                           done=any(r.done for r in latests), total_steps=max(totals, default=None),
                           checkpoint=max(saved, default=None))
