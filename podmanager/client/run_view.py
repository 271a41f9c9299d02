"""What a run's handle is, whether the run's records are on this machine (`RunHandle`) or on a
controller VM reached through the channel (`RemoteRunHandle`): its record, its result once it
has finished, a wait for that result, and the line shown when following skips output."""

from __future__ import annotations

from abc import ABC, abstractmethod

from podmanager.core.clock import poll_until
from podmanager.core.errors import TimeoutExceededError
from podmanager.core.records import HostRef
from podmanager.state.run_records import RunRecord, final_result
from podmanager.state.run_results import RunResult


class RunView(ABC):
    cluster: str
    run_id: str
    wait_poll_s = 0.25  # how often `wait` reads the record

    @abstractmethod
    def status(self) -> RunRecord:
        """The run's record as it is now."""

    def result(self) -> RunResult | None:
        run = self.status()
        return final_result(run) if run.finished else None

    def wait(self, *, timeout_s: float | None = None, poll_s: float | None = None) -> RunResult:
        """Block until the run has finished; its result."""
        return poll_until(self.result, timeout_s=float("inf") if timeout_s is None else timeout_s,
                          interval_s=self.wait_poll_s if poll_s is None else poll_s,
                          on_timeout=lambda: TimeoutExceededError(
                              f"run {self.run_id} still {self.status().status} after {timeout_s:.0f}s"))

    def skip_notice(self, host: HostRef, skipped: int, where: str = "") -> str:
        """What following shows when it skipped a host's lines to keep up; `where`: the log's path."""
        return (f"podmanager: {skipped} line(s) skipped here to keep up; every line is in "
                f"'podmanager logs -c {self.cluster} --run {self.run_id} --host {host.label}'"
                + (f" ({where})" if where else "") + "\n")
