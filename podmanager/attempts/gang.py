"""Gang-launch one attempt: a process per host on every host of the run's slices, started,
polled (exit codes, output, progress) and stopped together, through the host agents.
When one fails its siblings are stopped at once, instead of hanging in the next collective.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from podmanager.attempts.remote import RAY, Remote
from podmanager.core.records import HostSlot
from podmanager.runtime.contract import ProgressRecord
from podmanager.vm.environments import HostSetup
from podmanager.vm.host_wire import HostLaunch, PollReply, RunSetup
from podmanager.vm.process import TAIL_BYTES, TAIL_LINES

SETUP_TIMEOUT_S = 1800.0  # installing a run's requirements on a host may take minutes


@dataclass
class HostState:
    """What the controller knows of one host's process in this attempt."""

    slot: HostSlot
    running: bool = True
    exit_code: int | None = None
    lost: str | None = None  # the host (agent) is unreachable or dead: why
    output_offset: int = 0
    behind: bool = False  # the last reply left output on the host: the next poll does not hold
    collected: bool = False  # the process has exited and all its output is here
    progress: ProgressRecord | None = None
    first_progress: ProgressRecord | None = None
    last_lines: list[str] = field(default_factory=list)
    asked_to_stop: bool = False  # its agent sent its process SIGTERM (a notice's, or a stop's)

    @property
    def key(self) -> tuple[int, int]:
        return (self.slot.slice_index, self.slot.worker_id)

    def remember(self, data: bytes) -> None:
        # Only the end of a chunk can hold its last lines: no work that grows with the output.
        lines = data[-TAIL_BYTES:].decode("utf-8", "replace").splitlines()
        self.last_lines = (self.last_lines + lines)[-TAIL_LINES:]


OutputCallback = Callable[[HostSlot, bytes], None]


class Gang:
    """One attempt's processes across all hosts, started, polled and stopped together."""

    def __init__(self, agents: list[tuple[HostSlot, Any]], run_id: str, *, poll_timeout_s: float = 10.0,
                 hold_s: float = 1.0, remote: Remote = RAY):
        self.agents = agents
        self.remote = remote
        self.run_id = run_id
        self.poll_timeout_s = poll_timeout_s
        # Each agent answers a poll when its process exits or after `hold_s`: exits are seen
        # at once, while a healthy run costs each host one call per `hold_s`. (Short polls
        # every quarter second slowed a lockstep 2-host program by several percent.)
        self.hold_s = hold_s
        self._in_flight: dict[tuple[int, int], tuple[Any, float]] = {}  # host -> (poll request, sent at)
        self.hosts = [HostState(slot) for slot, _ in agents]

    def coordinator_port(self) -> int:
        """A free port on the coordinator host (worker 0 of the first slice)."""
        return self.remote.get(self.agents[0][1].free_port.remote(), timeout=self.poll_timeout_s)

    def setup(self, run: RunSetup, code: Any, *, timeout_s: float = SETUP_TIMEOUT_S,
              on_ready: Callable[[int, int], None] | None = None) -> list[tuple[HostSlot, HostSetup]]:
        """Set the run up on every host at once (code, requirements, program check); each
        reachable host's report, `on_ready(done, of)` told as hosts finish. A host that is lost
        meanwhile is marked lost, for the attempt's first poll to name."""
        pending = {agent.setup_workload.remote(run, code): host
                   for host, (_, agent) in zip(self.hosts, self.agents)}
        reports: list[tuple[HostSlot, HostSetup]] = []
        deadline = time.monotonic() + timeout_s
        while pending:
            ready, _ = self.remote.wait(list(pending), 1, max(0.0, deadline - time.monotonic()))
            if not ready:
                for host in pending.values():
                    host.lost, host.running = f"no answer to the setup within {timeout_s:.0f}s", False
                break
            host = pending.pop(ready[0])
            try:
                reports.append((host.slot, self.remote.get(ready[0])))
            except RayActorError as error:
                host.lost, host.running = f"{type(error).__name__} during the setup", False
            if on_ready:
                on_ready(len(self.hosts) - len(pending), len(self.hosts))
        return reports

    def start(self, run: RunSetup, attempt: int, envs: list[dict[str, str]]) -> None:
        """Start `attempt` of the run on every host that is not lost, each with its own environment."""
        calls = [agent.start_workload.remote(HostLaunch(run=run, attempt=attempt, env=env))
                 for (host, (_, agent)), env in zip(zip(self.hosts, self.agents), envs) if not host.lost]
        self.remote.get(calls, timeout=120)

    def poll(self, on_output: OutputCallback | None = None, wait_s: float = 0.5) -> list[HostState]:
        """Refresh every host's state, waiting at most `wait_s`: a host that has not answered
        keeps its request in flight for the next poll, so one dead (or simply holding) host
        never stalls the others or the health checks between polls. An agent that raises,
        or has not answered for `poll_timeout_s`, is recorded as lost. A host is polled until
        its process has exited and its output is all here; one that is behind, or has exited,
        is polled without a hold."""
        now = time.monotonic()
        for host, (_, agent) in zip(self.hosts, self.agents):
            if not host.collected and not host.lost and host.key not in self._in_flight:
                hold = 0.0 if host.behind or not host.running else self.hold_s
                self._in_flight[host.key] = (agent.poll_workload.remote(self.run_id, host.output_offset, hold), now)
        refs = [ref for ref, _ in self._in_flight.values()]
        ready, _ = self.remote.wait(refs, len(refs), wait_s) if refs else ([], [])
        ready_set = set(ready)
        for host in self.hosts:
            if host.key not in self._in_flight:
                continue
            ref, sent = self._in_flight[host.key]
            if ref not in ready_set:
                if time.monotonic() - sent > self.poll_timeout_s:
                    del self._in_flight[host.key]
                    host.lost, host.running = f"no answer for {self.poll_timeout_s:.0f}s", False
                continue
            del self._in_flight[host.key]
            try:
                report = self.remote.get(ref)
            except RayActorError as error:
                host.lost = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
                host.running = False
                continue
            except RayTaskError as error:  # the agent answered with an error: it cannot say how its process is
                host.lost, host.running = f"the host's agent failed to poll: {error.cause}", False
                continue
            self._heard(host, report, on_output)
        return self.hosts

    def _heard(self, host: HostState, report: PollReply, on_output: OutputCallback | None) -> None:
        if report.output:
            host.remember(report.output)
            if on_output:
                on_output(host.slot, report.output)
        host.output_offset = report.offset
        host.behind = report.left > 0
        host.progress = report.progress or host.progress
        host.first_progress = report.first_progress or host.first_progress
        # A reply sent before `stop` may arrive after it: it does not bring the process back.
        host.running = report.running and host.running
        host.exit_code = report.exit_code if report.exit_code is not None else host.exit_code
        host.asked_to_stop = host.asked_to_stop or report.asked_to_stop
        if not report.running:
            host.collected = report.left == 0
            if report.tail:
                host.last_lines = list(report.tail)

    def collect(self, on_output: OutputCallback | None = None, *, timeout_s: float = 300.0,
                wait_s: float = 0.5) -> None:
        """Once every process has exited (or was stopped): poll until all their output is
        here, what they printed while stopping included. A host lost meanwhile, or output
        still coming after `timeout_s`, is noted at the end of that host's output."""
        deadline = time.monotonic() + timeout_s
        while any(not h.collected and not h.lost for h in self.hosts) and time.monotonic() < deadline:
            self.poll(on_output, wait_s=wait_s)
        for host in self.hosts:
            if not host.collected and on_output:
                why = host.lost or f"still coming after {timeout_s:.0f}s"
                on_output(host.slot, f"\n[podmanager] output of {host.slot.label} after byte {host.output_offset} "
                                     f"was not collected ({why})\n".encode())

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM every process, SIGKILL after the grace period; lost hosts are skipped.
        Each host's exit code is recorded."""
        calls = [(host, agent.stop_workload.remote(self.run_id, grace_s))
                 for host, (_, agent) in zip(self.hosts, self.agents) if not host.lost]
        for host, call in calls:
            try:
                code = self.remote.get(call, timeout=grace_s + self.poll_timeout_s)
            except (RayActorError, GetTimeoutError) as error:
                host.lost = host.lost or f"{type(error).__name__} while stopping"
                continue
            if host.exit_code is None:
                host.exit_code = code
            host.running = False

    def any_notice(self, slice_index: int, timeout_s: float = 2.0) -> bool:
        """Whether any host of the slice has a preemption or maintenance notice."""
        refs = [agent.preemption_notice.remote() for host, (slot, agent) in zip(self.hosts, self.agents)
                if slot.slice_index == slice_index and not host.lost]
        try:
            return any(self.remote.get(refs, timeout=timeout_s))
        except (RayActorError, GetTimeoutError):
            return False  # a host that does not answer is the lost-host check's business

    def signal(self, signum: int) -> None:
        """Send a signal to every reachable host's process (e.g. SIGTERM: checkpoint now)."""
        for host, (_, agent) in zip(self.hosts, self.agents):
            if not host.lost:
                agent.signal_workload.remote(self.run_id, signum)
