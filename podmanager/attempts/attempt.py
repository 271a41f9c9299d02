"""One `run`: set every host up (the run's code, its requirements), launch an attempt on
every host, stream its output, stop every sibling when one fails, and record the result
(and the logs) locally.

An attempt ends in one of four ways: every process exited 0 (succeeded), a process
exited non-zero or a host was lost (failed: the others are stopped at once), a host could
not be set up (failed before anything started, with `setup_error`), or the user
interrupted it (every process is stopped, then KeyboardInterrupt goes on up).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from ray.exceptions import GetTimeoutError, RayActorError

from podmanager.attempts.gang import Gang, HostState
from podmanager.attempts.launch import launch_envs
from podmanager.attempts.logs import RunFolder
from podmanager.attempts.progress import combine
from podmanager.attempts.remote import RAY, Remote
from podmanager.attempts.results import OutputPrinter
from podmanager.core import paths
from podmanager.core.clock import Clock, RealClock
from podmanager.core.records import HostSlot
from podmanager.core.run_results import AttemptResult, HostResult, SetupError
from podmanager.core.workload import Workload, check_parallelism
from podmanager.runtime.contract import EXIT_PREEMPTED
from podmanager.vm.environments import HostSetup
from podmanager.vm.host_wire import RunSetup

CANCELLED = "cancelled on request"  # the reason an attempt stops when its run is cancelled
# The reason an elastic run's attempt on fewer slices stops once its lost slices are back: the
# program checkpoints on the SIGTERM, as on a notice, and the next attempt resumes on all of them.
GROW = "stopped at a checkpoint to grow back to all the run's slices"


def new_run_id(workload: Workload) -> str:
    return f"{workload.display_name}-{time.strftime('%Y%m%d-%H%M%S')}-{int(time.time() * 1000) % 1000:03d}"


WATCHED_HOLD_S = 0.2  # each agent's long poll while the output is followed live
WATCHED_FOR_S = 5.0  # a follower's mark lasts this long (the dashboard renews it with each read)


class AttemptRunner:
    """Runs attempts of one workload on a fixed set of host agents."""

    def __init__(self, cluster: str, workload: Workload, run_id: str, *, simulated: bool,
                 checkpoint_dir: str | None, code_zip: Path | None = None, printer: OutputPrinter | None = None,
                 poll_interval_s: float = 0.25, stop_grace_s: float = 10.0, failure_grace_s: float = 2.0,
                 remote: Remote = RAY, clock: Clock | None = None, secret_env: dict[str, str] | None = None):
        """`clock`: what attempts are timed and paced by (tests pass a fake one). `secret_env`:
        environment every process gets that no record may hold (a service's replica token)."""
        self.cluster = cluster
        self.clock = clock or RealClock()
        self.workload = workload
        self.secret_env = secret_env or {}
        self.run_id = run_id
        self.simulated = simulated
        self.checkpoint_dir = checkpoint_dir
        # A dry run's hosts are on this machine: they share the cluster's compile cache, so a
        # relaunch (a recovery, the same program again) compiles nothing on any host.
        self.compile_cache = str(paths.cluster_dir(cluster) / "jax-cache") if simulated else None
        self.printer = printer
        self.poll_interval_s = poll_interval_s
        self.remote = remote
        self.stop_grace_s = stop_grace_s
        # After a failure the survivors cannot finish a collective checkpoint without their
        # lost or failed peer: they only need a moment to exit, not the user's grace period.
        self.failure_grace_s = failure_grace_s
        self.logs = RunFolder(cluster, run_id)
        # The run's code as the controller keeps it (`attempts/package.py`): the zip packed where
        # the user ran podmanager, handed as it is to every host through Ray's object store.
        self.code_zip = code_zip
        self._code_ref = None
        # The run as every host sets it up; the kept zip is named by its digest (`package.py`).
        self.setup_record = RunSetup(run_id=run_id, workload=workload,
                                     code_digest=code_zip.stem if code_zip is not None else None)

    def code(self) -> Any:
        if self._code_ref is None and self.code_zip is not None:
            self._code_ref = self.remote.put(self.code_zip.read_bytes())
        return self._code_ref

    def run_attempt(self, agents: list[tuple[HostSlot, Any]], attempt: int,
                    make_monitor: Callable[[Gang], Any] | None = None, *,
                    on_launched: Callable[[], None] | None = None,
                    on_setup: Callable[[int, int], None] | None = None,
                    on_setup_done: Callable[[float, list[str]], None] | None = None,
                    reattach: dict[str, int] | None = None, started: float | None = None) -> AttemptResult:
        """One attempt on all `agents`. `make_monitor(gang)` gives a health monitor whose
        `check()` may return a reason to stop the attempt early; `on_setup(done, of)` hears
        hosts finish their setup; `on_setup_done(seconds, installed)` is told when every host
        is set up, before any program starts (`installed`: the hosts that installed something);
        `on_launched()` is told once every process has started.
        With `reattach` (host label -> bytes of this attempt's output already kept), the
        processes already run: watch them instead of setting up and launching."""
        slots = [slot for slot, _ in agents]
        if self.workload.parallelism:
            check_parallelism(self.workload.parallelism, sum(s.chips for s in slots))
        gang = Gang(agents, self.run_id, remote=self.remote)
        setup_s, installed, already = 0.0, [], []
        if reattach is None:
            setup_started = self.clock.now()
            reports = gang.setup(self.setup_record, self.code(), on_ready=on_setup)
            setup_s = self.clock.now() - setup_started
            failed = next(((slot, r) for slot, r in reports if not r.ok), None)
            if failed is not None:
                return self._setup_failed(gang, attempt, setup_started, setup_s, *failed)
            built = {slot for slot, report in reports if not report.reused}
            installed = [slot.label for slot in slots if slot in built]  # in host order, not finishing order
            before = {slot for slot, report in reports if report.already}
            already = [slot.label for slot in slots if slot in before]
            if on_setup_done:
                on_setup_done(setup_s, installed)
        monitor = make_monitor(gang) if make_monitor else None
        started = started or self.clock.now()
        try:
            if reattach is not None:
                for host in gang.hosts:
                    host.output_offset = reattach.get(host.slot.label, 0)
            else:
                try:
                    envs = launch_envs(slots, coordinator_port=gang.coordinator_port(), cluster=self.cluster,
                                       run_id=self.run_id, attempt=attempt, checkpoint_dir=self.checkpoint_dir,
                                       parallelism=self.workload.parallelism, simulated=self.simulated,
                                       extra=self.secret_env, compile_cache=self.compile_cache)
                    gang.start(self.setup_record, attempt, envs)
                except (RayActorError, GetTimeoutError):
                    pass  # a host went away during the launch: the next poll names it as lost
            if on_launched:
                on_launched()
            failed, reason = self._watch(gang, monitor.check if monitor else None)
        except BaseException:
            gang.stop(grace_s=self.stop_grace_s)
            raise
        detected_at = None
        if failed is not None or reason is not None:
            detected_at = self.clock.now()
            # A program that stopped for a preemption notice (exit 75): its peers are finishing
            # the same checkpoint and get the full grace period.
            noticed = failed is not None and failed.exit_code == EXIT_PREEMPTED
            # A cancel or a grow stops healthy programs: like a notice, they may checkpoint on SIGTERM.
            gentle = noticed or reason in (CANCELLED, GROW)
            gang.stop(grace_s=self.stop_grace_s if gentle else self.failure_grace_s)
        # Every host's output to its end, what the stopped ones printed while stopping included.
        gang.collect(self._output)
        result = self._result(gang.hosts, attempt, started, failed, reason)
        result.detected_at = detected_at
        result.setup_s, result.setup_installed, result.setup_already = setup_s, installed, already
        return result

    def _setup_failed(self, gang: Gang, attempt: int, started: float, setup_s: float, slot: HostSlot,
                      report: HostSetup) -> AttemptResult:
        """The run cannot start: nothing was launched, no host is to blame for a failure."""
        error = SetupError(host=slot.label, error=report.error or "setup failed", lines=list(report.lines))
        return AttemptResult(attempt=attempt, status="failed", started=started + setup_s, ended=self.clock.now(),
                             hosts=[_host_result(h, exit_code=None) for h in gang.hosts],
                             failed_host=slot.label, failure=f"setup failed: {error.error}", last_lines=error.lines,
                             setup_s=setup_s, setup_error=error)

    def _watch(self, gang: Gang, should_abort: Callable[[], str | None] | None) -> tuple[HostState | None, str | None]:
        """Poll until every process has exited 0, one failed (returned), or abort is asked."""
        held = gang.hold_s
        while True:
            started = self.clock.now()
            # Followed live (the dashboard marks it): a line printed on a host is here within about
            # a poll interval, not a whole hold; only while followed, as short holds slow a program.
            gang.hold_s = min(held, WATCHED_HOLD_S) if self.logs.watched(within_s=WATCHED_FOR_S) else held
            hosts = gang.poll(self._output, wait_s=self.poll_interval_s)
            failed = next((h for h in hosts if h.lost or (not h.running and h.exit_code != 0)), None)
            if failed is not None:
                return failed, None
            if all(not h.running for h in hosts):
                return None, None
            reason = should_abort() if should_abort else None
            if reason is not None:
                return None, reason
            self.clock.sleep(max(0.0, self.poll_interval_s - (self.clock.now() - started)))

    def _output(self, slot: HostSlot, data: bytes) -> None:
        self.logs.append(slot, data)
        if self.printer:
            self.printer(slot, data.decode("utf-8", "replace"))

    def _result(self, hosts: list[HostState], attempt: int, started: float, failed: HostState | None,
                reason: str | None) -> AttemptResult:
        results = [_host_result(h, exit_code=h.exit_code) for h in hosts]
        if failed is not None:
            status = "failed"
            failure = failed.lost or f"exited with code {failed.exit_code}"
        elif reason is not None:
            status, failure = "failed", reason
        else:
            status, failure = "succeeded", None
        progress = combine(hosts)
        first, last = progress.first, progress.latest
        return AttemptResult(
            attempt=attempt,
            status=status,
            started=started,
            ended=self.clock.now(),
            hosts=results,
            failed_host=failed.slot.label if failed else None,
            failure=failure,
            last_lines=failed.last_lines if failed else [],
            first_step=first.step if first else None,
            last_step=last.step if last else None,
            first_loss=first.loss if first else None,
            last_loss=last.loss if last else None,
            first_step_time=first.time if first else None,
            last_step_time=last.time if last else None,
            checkpoint_step=progress.checkpoint[0] if progress.checkpoint else None,
            checkpoint_time=progress.checkpoint[1] if progress.checkpoint else None,
        )


def _host_result(host: HostState, *, exit_code: int | None) -> HostResult:
    return HostResult(slice=host.slot.slice_index, worker_id=host.slot.worker_id, exit_code=exit_code, lost=host.lost)
