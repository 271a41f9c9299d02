"""One attempt of a run on its hosts, as its supervisor starts it: launched afresh (whatever is
left of the run on the hosts stopped first, the output a lost supervisor did not collect kept),
or re-attached to when every host still holds it. The run's phase goes `Launching` ->
`Running` in its record as the attempt does, and its setup is told in the events.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ray.exceptions import GetTimeoutError, RayActorError

from podmanager.attempts.attempt import AttemptRunner
from podmanager.attempts.gang import Gang
from podmanager.core.errors import PodmanagerError
from podmanager.core.events import EventKind
from podmanager.core.records import HostSlot
from podmanager.core.run_results import AttemptResult
from podmanager.core.workload import Workload
from podmanager.state.run_records import RunRecord
from podmanager.state.run_state import Launching, Running
from podmanager.supervision.left_output import keep_left_output
from podmanager.supervision.ports import SupervisedCluster
from podmanager.vm.host_wire import HeldRun


class AttemptLauncher:
    def __init__(self, cluster: SupervisedCluster, run: RunRecord, workload: Workload, runner: AttemptRunner,
                 record: Callable[..., None], save: Callable[[], None]):
        self.cluster = cluster
        self.clock = cluster.clock
        self.run = run
        self.workload = workload
        self.runner = runner
        self.record = record
        self.save = save

    def run_attempt(self, current: Launching | Running, watch: Callable[[Gang], Any]) -> AttemptResult:
        """Launch attempt N (the run's), or re-attach to it if every host still holds it; its
        result once it has ended. `watch`: the health monitor for the attempt's gang."""
        run, attempt, on_slices = self.run, self.run.attempt, current.on_slices
        agents = self._agents(on_slices or run.slices)
        logs = self.runner.logs
        reattach = None
        if current.attempt == attempt and self._all_hold(agents, attempt):
            base = current.log_base
            reattach = {slot.label: max(0, logs.size(slot) - base.get(slot.label, 0)) for slot, _ in agents}
            self.record(EventKind.REATTACHED, f"attempt {attempt} still runs on all {len(agents)} host(s); re-attached "
                        "without restarting it", attempt=attempt)
            started = current.started if current.started is not None else self.clock.now()
        else:
            self._stop_strays(agents)
            if current.attempt == attempt and current.log_base:  # launched before this supervisor started
                keep_left_output(run.run_id, attempt, agents, current.log_base, logs, self.runner.remote,
                                 lambda warning: self.record(EventKind.WARNING, warning))
            started = self.clock.now()
            run.phase = Launching(attempt=attempt, started=started, on_slices=on_slices,
                                  log_base={slot.label: logs.size(slot) for slot, _ in agents})
            run.status = "running"
            self.save()
            self.record(EventKind.ATTEMPT_STARTED, f"attempt {attempt} on {len(agents)} host(s)", attempt=attempt)

        def launched() -> None:  # also after a re-attach, to an attempt that may be `Running` already
            phase = run.phase
            if isinstance(phase, Launching):
                run.phase = Running(attempt=phase.attempt, started=phase.started, log_base=phase.log_base,
                                    on_slices=phase.on_slices)
            self.save()

        def set_up(done: int, of: int) -> None:
            self.record(EventKind.SETUP_PROGRESS, f"setup: {done}/{of} host(s) ready", ready=done, hosts=of)

        def setup_done(seconds: float, installed: list[str]) -> None:  # before the programs start
            self.record(EventKind.SETUP_DONE, f"{len(agents)} host(s) set up in {seconds:.1f}s"
                        + (f" (installed on {', '.join(installed)})" if installed else " (nothing to install)"),
                        attempt=attempt, seconds=seconds, installed=installed)

        if reattach is None:
            wanted = [r for r in self.workload.requirements or [] if not r.startswith("-")]  # not index options
            self.record(EventKind.SETUP_STARTED, f"setting up {len(agents)} host(s): the working dir"
                        + (f", {len(wanted)} requirement(s)" if wanted else ""), attempt=attempt)
        result = self.runner.run_attempt(agents, attempt, watch, on_launched=launched, on_setup=set_up,
                                         on_setup_done=setup_done, reattach=reattach,
                                         started=None if reattach is None else started)
        result.degraded = on_slices is not None
        return result

    def _agents(self, slices: list[int]) -> list[tuple[HostSlot, Any]]:
        """The host agents of these slices of the run; if some are missing (a slice lost between
        attempts), the cluster is healed first: dead slices replaced, every host joined."""
        try:
            return self.cluster.agents(slices)
        except PodmanagerError as missing:
            self.record(EventKind.HEALING, f"before launching: {missing.message}; bringing the slices back")
            self.cluster.heal()
            return self.cluster.agents(slices)

    def _all_hold(self, agents: list[tuple[HostSlot, Any]], attempt: int) -> bool:
        """Every host holds `attempt` of this run (running or exited)."""
        try:
            found: list[HeldRun | None] = self.runner.remote.get(
                [agent.workload_status.remote(self.run.run_id) for _, agent in agents], timeout=10)
        except (RayActorError, GetTimeoutError):
            return False
        return all(f is not None and f.attempt == attempt for f in found)

    def _stop_strays(self, agents: list[tuple[HostSlot, Any]]) -> None:
        """Stop whatever is left of this run on the hosts (a launch cut short, survivors of a
        lost host) before launching afresh: one copy of the program, never two."""
        Gang(agents, self.run.run_id, remote=self.runner.remote).stop(grace_s=self.runner.failure_grace_s)
