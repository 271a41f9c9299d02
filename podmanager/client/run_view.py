"""What a run's handle is, whether the run's records are on this machine (`RunHandle`) or on a
controller VM reached through the channel (`RemoteRunHandle`): its record, its result once it
has finished, a wait for that result, following it, cancelling it, and the line shown when
following skips output."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable

from podmanager.channel.run_status import RunStatus
from podmanager.core.clock import poll_until
from podmanager.core.errors import TimeoutExceededError
from podmanager.core.event_data import Event
from podmanager.core.records import HostRef
from podmanager.core.run_results import RunResult, final_result

EventCallback = Callable[[Event], None]
Printer = Callable[[Any, str], None]  # (the host, as HostRef or HostSlot, a chunk of its output)


class RunView(ABC):
    cluster: str
    run_id: str
    wait_poll_s = 0.25  # how often `wait` reads the record

    @abstractmethod
    def status(self) -> RunStatus:
        """The run's status as it is now."""

    @abstractmethod
    def follow(self, printer: Printer | None = None, on_event: EventCallback | None = None, *,
               after_event: Any = None, on_interrupt: Callable[[Any], bool] | None = None) -> RunResult:
        """Every host's output and the run's events until it has finished; its result."""

    @abstractmethod
    def cancel(self, *, wait: bool = True, timeout_s: float = 60.0) -> RunStatus:
        """Stop the run; its status (once it has stopped, with `wait`)."""

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
