"""The run supervisor: attempt after attempt until the program finishes, a budget is spent
or the run is cancelled — resumable at every step.

Each attempt launches on every host of the run's slices with a fresh distributed
environment, under the health monitor. When it ends badly the failure is classified, paid
from its budget, and recovered from: a preemption deletes the lost slices at once and
creates them again through the reconcile loop, waits for their hosts, and relaunches from
the latest checkpoint.

Level-triggered, like provisioning: the run's record (state/run_records.py) says where the
supervisor is — its phase (state/run_state.py): `Launching` or `Running` attempt N,
`Replacing` slices before attempt N, or `Finished` — and is written before each step; the
loop in `supervise` matches on it in one place. A supervisor started on a run that is already under
way (after its process was killed) re-reads it and looks at the hosts as they are now: if
every host still holds attempt N it re-attaches without a restart; a replacement whose
delete already happened only creates what is missing. So it never starts a second copy of
the program and never replaces a slice twice.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path
from typing import Any

from ray.exceptions import GetTimeoutError, RayActorError, RayError

from podmanager.attempts import package
from podmanager.attempts.attempt import CANCELLED, GROW, AttemptRunner
from podmanager.attempts.gang import Gang
from podmanager.attempts.progress import combine
from podmanager.attempts.remote import RAY, Remote
from podmanager.attempts.results import OutputPrinter
from podmanager.core import spares
from podmanager.core.errors import PodmanagerError
from podmanager.core.events import EventKind
from podmanager.core.records import HostSlot
from podmanager.core.workload import Workload, check_parallelism
from podmanager.runtime.replica_protocol import ENV_SERVICE_ID
from podmanager.serving.router import ReplicaLoss
from podmanager.state import run_secrets, service_tokens
from podmanager.state.run_records import RunRecord, RunStore
from podmanager.state.run_results import AttemptResult, IncidentRecord, RunResult
from podmanager.state.run_state import (
    Finished,
    Launching,
    Replacing,
    Running,
    RunProgress,
    SupervisorProcess,
)
from podmanager.supervision.classify import Cause, Incident, classify, finished
from podmanager.supervision.health import HealthMonitor
from podmanager.supervision.ledger import badput, classified, goodput, summarize
from podmanager.supervision.policy import (
    RecoveryPolicy,
    RecoveryState,
    quarantined,
    slices_left,
)
from podmanager.supervision.ports import SupervisedCluster
from podmanager.supervision.spare_preparation import SparePreparer
from podmanager.vm.workload_runs import HeldRun

# An attempt's failure when its program exited 0 after a notice's SIGTERM without saying it was done.
STOPPED_FOR_NOTICE = ("exited after the preemption notice's SIGTERM without saying it was done (report_progress's "
                      "done or total_steps): stopped for the notice")
PROGRESS_EVERY_S = 1.0  # how often the latest step goes into the run's record
GROW_CHECK_EVERY_S = 1.0  # how often a shrunk run asks whether its lost slices' hosts are back
BRING_BACK_RETRY_S = 60.0  # after a failed background replacement, the next try


class RunSupervisor:
    def __init__(self, cluster: SupervisedCluster, runs: RunStore, run_id: str, *, code_zip: Path | None = None,
                 printer: OutputPrinter | None = None, poll_interval_s: float = 0.25, remote: Remote = RAY):
        """`code_zip`: the run's working dir as kept on the controller (`attempts/package.py`);
        None ships nothing."""
        run = runs.get(run_id)
        if run is None:
            raise PodmanagerError(f"--run: no run {run_id!r}")
        self.cluster = cluster
        self.clock = cluster.clock
        self.runs = runs
        self.run = run
        self.run_id = run_id
        # The record keeps the environment's names; its values are the run's secrets.
        env = run.workload.env
        if run.active:
            env = run_secrets.load(cluster.name, run_id, env)
        self.workload = run.workload.model_copy(update={"env": env})
        self.policy = RecoveryPolicy.from_spec(cluster.spec.recovery.model_copy(update=run.budgets))
        self.runner = AttemptRunner(cluster.name, self.workload, run_id, simulated=cluster.spec.simulated,
                                    checkpoint_dir=run.checkpoint_dir, code_zip=code_zip, printer=printer,
                                    poll_interval_s=poll_interval_s, remote=remote, clock=self.clock,
                                    secret_env=service_tokens.replica_env(cluster.name, self.workload.env))
        self.ledger = run.ledger  # filled in as the run goes, saved with the record
        self.spare_preparer = SparePreparer(cluster, runs, run_id, self.runner, self.record)
        self._progress_saved = 0.0
        self._series_last: tuple[int, int] | None = None  # (attempt, step) of the series' last point
        self._checkpoint_noted: tuple[int, int] | None = None  # (attempt, step) of the last checkpoint recorded
        # An elastic run shrunk: the thread making its lost slices again while it goes on.
        self._bringing_back: threading.Thread | None = None
        self._brought_back = False  # the last background replacement ended with every slice made
        self._failed_at = 0.0  # when the last one failed
        self._grow_checked = 0.0

    # ------------------------------------------------------------------ the loop

    def supervise(self) -> RunResult:
        result = self._supervise()
        # A replacement still being made in the background is finished, not cut off mid-create:
        # the run's record already says it has ended, so no client waits for this.
        if self._bringing_back is not None:
            self._bringing_back.join()
        return result

    def _supervise(self) -> RunResult:
        if not self.run.active:
            return self._stored_result()
        starts = self.run.supervisor.starts
        self.run.supervisor = SupervisorProcess(pid=os.getpid(), started_at=self.clock.now(), starts=starts + 1)
        if starts == 0:
            self.record(EventKind.RUN_STARTED, f"run {self.run_id}: {self.workload.display_name} on slice(s) "
                        f"{self.run.slices}")
        else:
            self.record(EventKind.SUPERVISOR_RESTARTED, f"run {self.run_id}: supervisor restarted; carrying on from "
                        f"{self.run.phase.name} attempt {self.run.attempt}")
            self.ledger.incidents.append(IncidentRecord(
                attempt=self.run.attempt, cause=Cause.SUPERVISOR.value, slices=[],
                detail="the run's supervisor was lost (its process, or the Ray head when the controller crashed or "
                       "restarted) and started again from the run's record", detected_at=self.clock.now(), detect_s=None,
                recover_s=None, lost_steps=None, phases={}))
        self._save()
        if self._missing():  # carrying on from a shrunk attempt: its lost slices are still to be made
            self._bring_back(self._missing())
        while True:
            if self.run.cancel_requested:
                return self._finish("cancelled", CANCELLED)
            dropped = self._dropped()
            if dropped is not None:
                return self._finish("failed", dropped)
            match self.run.phase:
                case Replacing() as replacing:
                    self._replace(replacing)
                case Launching() | Running() as current:
                    ended = self._attempt_and_decide(current)
                    if ended is not None:
                        return ended
                case Finished():
                    return self._stored_result()

    def _attempt_and_decide(self, current: Launching | Running) -> RunResult | None:
        """Run attempt N to its end; the run's result if that ends the run, else None (the
        record's phase now says what comes next)."""
        result, monitor = self._attempt(current)
        if self.run.cancel_requested:
            return self._finish("cancelled", CANCELLED)
        if result.setup_error is not None:  # bad input: no budget spent, no slice replaced
            error = result.setup_error
            self.record(EventKind.SETUP_FAILED, f"run {self.run_id}: setting up {error.host} failed: {error.error}")
            return self._finish("failed", None)
        if result.status == "succeeded" and monitor is not None and not finished(monitor.clean_exit()):
            result.status, result.failure = "failed", STOPPED_FOR_NOTICE  # resumed on the replacement, as after 75
        if result.status == "succeeded":
            self.record(EventKind.RUN_SUCCEEDED, f"run {self.run_id} finished" + _at_step(result.last_step))
            return self._finish("succeeded", None)
        if result.failure == GROW:  # no incident: it stopped at a checkpoint because its slices are back
            self.run.attempt = result.attempt + 1
            self.run.phase = Launching(attempt=self.run.attempt)
            self._save()
            self.record(EventKind.RUN_GREW, f"run {self.run_id}: its lost slice(s) are back; attempt {self.run.attempt} "
                        f"resumes on all {len(self.run.slices)} slice(s) {self.run.slices} from the checkpoint"
                        + _at_step(result.last_step, "of step"), slices=self.run.slices, step=result.last_step)
            return None
        stop_reason = self._after_failure(result, monitor)
        return self._finish("failed", stop_reason) if stop_reason is not None else None

    def _stored_result(self) -> RunResult:
        return self.run.result if self.run.result is not None else self._finish("failed", None)

    def _attempt(self, current: Launching | Running) -> tuple[AttemptResult, HealthMonitor | None]:
        """Launch attempt N, or re-attach to it if every host still holds it; its result and
        the health monitor that watched it."""
        attempt = self.run.attempt
        on_slices = current.on_slices
        agents = self._agents(on_slices or self.run.slices)
        reattach = None
        if current.attempt == attempt and self._all_hold(agents, attempt):
            base = current.log_base
            reattach = {slot.label: max(0, self.runner.logs.size(slot) - base.get(slot.label, 0)) for slot, _ in agents}
            self.record(EventKind.REATTACHED, f"attempt {attempt} still runs on all {len(agents)} host(s); re-attached "
                        "without restarting it", attempt=attempt)
            started = current.started if current.started is not None else self.clock.now()
        else:
            self._stop_strays(agents)
            if current.attempt == attempt and current.log_base:  # launched before this supervisor started
                self._keep_left_output(agents, attempt, current.log_base)
            started = self.clock.now()
            self.run.phase = Launching(attempt=attempt, started=started, on_slices=on_slices,
                                       log_base={slot.label: self.runner.logs.size(slot) for slot, _ in agents})
            self.run.status = "running"
            self._save()
            self.record(EventKind.ATTEMPT_STARTED, f"attempt {attempt} on {len(agents)} host(s)", attempt=attempt)

        def launched() -> None:  # also after a re-attach, to an attempt that may be `Running` already
            phase = self.run.phase
            if isinstance(phase, Launching):
                self.run.phase = Running(attempt=phase.attempt, started=phase.started, log_base=phase.log_base,
                                         on_slices=phase.on_slices)
            self._save()

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
        monitor_box: list[HealthMonitor] = []
        result = self.runner.run_attempt(agents, attempt, lambda gang: self._monitor(gang, monitor_box),
                                         on_launched=launched, on_setup=set_up, on_setup_done=setup_done,
                                         reattach=reattach, started=None if reattach is None else started)
        result.degraded = on_slices is not None
        self._end_series(result)
        if result.checkpoint_step is not None and result.checkpoint_time is not None:  # one saved as it stopped
            self._note_checkpoint(result.attempt, result.checkpoint_step, result.checkpoint_time)
        self.ledger.attempts.append(result)
        pending = self._pending_incident()
        if pending is not None:
            self._close_incident(pending, result)
        self._save()
        return result, monitor_box[0] if monitor_box else None

    def _after_failure(self, result: AttemptResult, monitor: HealthMonitor | None) -> str | None:
        """Classify, pay from the budget, and either stop (the reason) or plan the recovery."""
        dropped = self._dropped()
        if dropped is not None:  # not a preemption: nothing to pay, nothing to replace
            return dropped
        incident = classify(monitor.observation(self.cluster.lost_hosts())) if monitor else \
            Incident(Cause.INFRASTRUCTURE, frozenset(), result.failure or "the attempt ended without a clear cause")
        detected_at = result.detected_at or result.ended
        self.record(EventKind.INCIDENT, f"attempt {result.attempt}: {incident.cause.value}: {incident.detail}",
                    cause=incident.cause.value, slices=sorted(incident.slices))
        self._tell_router(result.attempt, preempted=incident.cause is Cause.PREEMPTION)
        self.ledger.incidents.append(
            self._incident(result.attempt, incident, detected_at, monitor, {"stop": result.ended - detected_at}))
        state = self._recovery_state()
        decision = self.policy.decide(state)
        if not decision.retry:
            self.record(EventKind.RUN_FAILED, f"run {self.run_id} stopped: {decision.reason}")
            self._save()
            self.cluster.delete_dead_slices()  # never leave a preempted slice holding quota
            return decision.reason
        replace = sorted(set(incident.slices) | quarantined(state))
        # Only a slice the cloud took is swapped: a quarantined or unhealthy one left as a spare
        # would look ready and never be made again.
        swapped = self._swap_in_spares(sorted(incident.slices)) if incident.cause is Cause.PREEMPTION else {}
        replace = [i for i in replace if i not in swapped]
        working = [swapped.get(i, i) for i in self._working()]
        going_on = slices_left(working, replace, self.workload.min_slices, self._fits) \
            if incident.cause is Cause.PREEMPTION else None
        self.run.status = "recovering"
        if going_on is not None:  # elastic: on at once with the slices left; the lost ones made again meanwhile
            self.run.attempt = result.attempt + 1
            self.run.phase = Launching(attempt=self.run.attempt, on_slices=going_on)
            self._save()
            self.record(EventKind.RUN_SHRUNK, f"run {self.run_id}: slice(s) {replace} lost and no spare ready; attempt "
                        f"{self.run.attempt} goes on at once on {len(going_on)} of its {len(self.run.slices)} slices "
                        f"{going_on} while they are made again", lost=replace, slices=going_on)
            self._bring_back(self._missing(), since=detected_at)
        elif replace:
            self.run.phase = Replacing(attempt=result.attempt + 1, slices=replace, reason=incident.cause.value)
        else:  # nothing to replace (a spare took each lost slice's place): relaunch at once
            self.run.attempt = result.attempt + 1
            shrunk = set(working) != set(self.run.slices)  # a shrunk run stays so until its slices are back
            self.run.phase = Launching(attempt=self.run.attempt, on_slices=working if shrunk else None)
        self._save()
        if decision.wait_s:
            self.record(EventKind.BACKOFF, f"waiting {decision.wait_s:.0f}s before the next attempt")
            self.clock.sleep(decision.wait_s)
        return None

    def _tell_router(self, attempt: int, *, preempted: bool) -> None:
        """A service's replica: its router retries what the lost attempt's predict ran on only
        if the cloud took the slice (else that request may be what ended the replica)."""
        service_id = self.workload.env.get(ENV_SERVICE_ID)
        if not service_id:
            return
        try:
            self.cluster.replica_lost(service_id, ReplicaLoss(run_id=self.run_id, attempt=attempt, preempted=preempted))
        except Exception as error:  # noqa: BLE001 - the router answers them 502 after its queue timeout
            self.record(EventKind.WARNING, f"run {self.run_id}: the service's router was not told how attempt "
                        f"{attempt} ended: {error}")

    def _swap_in_spares(self, lost: list[int]) -> dict[int, int]:
        """Give the run a ready hot spare of the same shape for each lost slice it can (lost ->
        spare); each lost slice becomes a spare, which the cluster's monitor makes again in the
        background (cluster/spare_keeper.py). Recorded in the events and the incident."""
        spare_slices = self.runs.spares(self.cluster.name)
        if not lost or not spare_slices:
            return {}
        started = self.clock.now()

        def ready(index: int) -> bool:  # READY with every host's agent healthy
            try:
                self.cluster.agents([index])
                return True
            except PodmanagerError:
                return False

        swapped: dict[int, int] = {}
        taken: set[int] = set()  # by another run (a replica of the same service, say) since they were read
        for index in lost:
            while (spare := spares.pick(self.cluster.spec, index, [s for s in spare_slices if s not in taken],
                                        ready)) is not None:
                if self.runs.swap_spare(self.run, index, spare):
                    break
                taken.add(spare)
            if spare is not None:
                taken.add(spare)
                swapped[index] = spare
                self.record(EventKind.SPARE_SWAPPED, f"run {self.run_id}: hot spare slice {spare} takes the place of lost "
                            f"slice {index} at once; slice {index} becomes a spare, made again in the background",
                            lost=index, spare=spare, slices=self.run.slices)
        if swapped and self.ledger.incidents:
            incident = self.ledger.incidents[-1]
            incident.swaps = [[index, spare] for index, spare in swapped.items()]
            incident.phases["swap"] = self.clock.now() - started
        return swapped

    def _replace(self, phase: Replacing) -> None:
        """Delete the lost slices (once), create what is missing, wait for the hosts, and move
        on to launching the next attempt. Safe to run again from any point."""
        if self._bringing_back is not None:  # one replacement at a time: it creates all that is missing
            self._bringing_back.join()
        incident = self.ledger.incidents[-1] if self.ledger.incidents else None
        timings = incident.phases if incident is not None else {}
        if phase.slices:
            started = self.clock.now()
            if not phase.deleted:
                self.cluster.delete_slices(phase.slices, reason=phase.reason,
                                           since=incident.detected_at if incident is not None else None)
                timings["delete"] = self.clock.now() - started
                self.run.phase = phase = phase.model_copy(update={"deleted": True})
                self._save()
                self.record(EventKind.SLICES_DELETED, f"slice(s) {phase.slices} deleted; creating them again",
                            slices=phase.slices)
            created = self.clock.now()
            self.cluster.restore_slices(timings)
            timings["replace_total"] = self.clock.now() - started
            self.record(EventKind.SLICES_REPLACED, f"slice(s) {phase.slices} replaced ({phase.reason}) in "
                        + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items() if k != "stop"),
                        slices=phase.slices, phases=timings, since=created)
        self.run.attempt = phase.attempt
        self.run.phase = Launching(attempt=phase.attempt)
        self._save()

    def _dropped(self) -> str | None:
        """Why the run cannot go on, when an `up` of an edited spec took some of its slices:
        they are not the run's to create again."""
        dropped = self.cluster.dropped_slices(self.run.slices)
        if not dropped:
            return None
        reason = (f"slice(s) {dropped} of the run are no longer in the cluster's spec (an 'up' of an edited "
                  "spec removed them); they are not created again")
        self.record(EventKind.RUN_FAILED, f"run {self.run_id} stopped: {reason}")
        return reason

    # ------------------------------------------------------------------ hosts

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
                [agent.workload_status.remote(self.run_id) for _, agent in agents], timeout=10)
        except (RayActorError, GetTimeoutError):
            return False
        return all(f is not None and f.attempt == attempt for f in found)

    def _keep_left_output(self, agents: list[tuple[HostSlot, Any]], attempt: int, base: dict[str, int]) -> None:
        """The lines the attempt's processes wrote that no supervisor collected (they ran on
        while the head was down), read from each host's output file into the run's logs
        before a new launch of the attempt writes over that file."""
        for slot, agent in agents:
            if slot.label not in base:
                continue
            while True:
                offset = max(0, self.runner.logs.size(slot) - base[slot.label])
                try:
                    left = self.runner.remote.get(agent.left_output.remote(self.run_id, attempt, offset), timeout=30)
                except RayError as error:  # a host that cannot answer or read the file: its lines stay on it
                    self.record(EventKind.WARNING, f"run {self.run_id}: {slot.label}'s output from before the "
                                f"supervisor restarted was not read: {error}")
                    break
                if not left:
                    break
                self.runner.logs.append(slot, left)

    def _stop_strays(self, agents: list[tuple[HostSlot, Any]]) -> None:
        """Stop whatever is left of this run on the hosts (a launch cut short, survivors of a
        lost host) before launching afresh: one copy of the program, never two."""
        Gang(agents, self.run_id, remote=self.runner.remote).stop(grace_s=self.runner.failure_grace_s)

    def _monitor(self, gang: Gang, box: list[HealthMonitor]) -> "_SupervisedMonitor":
        refs = self.cluster.slice_locations(self._working())  # not a lost slice being made again
        health = self.cluster.spec.health
        monitor = HealthMonitor(self.cluster.cloud, refs, gang, interval_s=health.interval_s,
                                hang_timeout_s=self.workload.hang_timeout_s or health.hang_timeout_s,
                                on_event=self.cluster.record, clock=self.clock, list_zone=self.cluster.zone_nodes)
        box.append(monitor)
        return _SupervisedMonitor(self, monitor, gang)

    # ------------------------------------------------------------------ elastic runs

    def _working(self) -> list[int]:
        """The slices the current attempt runs on: fewer than the run's while it is shrunk."""
        phase = self.run.phase
        on_slices = phase.on_slices if isinstance(phase, (Launching, Running)) else None
        return on_slices if on_slices is not None else list(self.run.slices)

    def _missing(self) -> list[int]:
        """The run's slices a shrunk attempt goes on without."""
        return sorted(set(self.run.slices) - set(self._working()))

    def _fits(self, slices: list[int]) -> bool:
        """The program's mesh fits these slices' chips (a mesh of fixed size fits only all of them)."""
        if not self.workload.parallelism:
            return True
        chips = sum(s.accelerator.chips for s in self.cluster.spec.slice_list() if s.index in slices)
        try:
            check_parallelism(self.workload.parallelism, chips)
        except PodmanagerError:
            return False
        return True

    def _bring_back(self, slices: list[int], since: float | None = None) -> None:
        """Make these lost slices again in the background (delete, create, wait for their hosts),
        after any replacement already under way, while the run goes on without them.
        `since`: the incident; a slice made again after it and READY is kept."""
        if since is None and self.ledger.incidents:
            since = self.ledger.incidents[-1].detected_at
        before = self._bringing_back
        self._brought_back = False

        def bring_back() -> None:
            if before is not None:
                before.join()
            timings: dict[str, float] = {}
            started = self.clock.now()
            try:
                self.cluster.delete_slices(slices, reason="lost; an elastic run goes on without it", since=since)
                self.cluster.restore_slices(timings)
            except Exception as error:  # noqa: BLE001 - the run goes on shrunk and tries again later
                self._failed_at = self.clock.now()
                self.record(EventKind.WARNING, f"run {self.run_id}: making slice(s) {slices} again failed: {error}; "
                            f"the run goes on without them and tries again in {BRING_BACK_RETRY_S:.0f}s")
                return
            self._brought_back = True
            timings["replace_total"] = self.clock.now() - started
            self.record(EventKind.SLICES_REPLACED, f"slice(s) {slices} made again in the background in "
                        + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items()), slices=slices, phases=timings)

        self._bringing_back = threading.Thread(target=bring_back, name=f"bring-back-{self.run_id}", daemon=True)
        self._bringing_back.start()

    def ready_to_grow(self) -> bool:
        """A shrunk attempt's lost slices are back, READY with every host's agent healthy (asked
        at most every GROW_CHECK_EVERY_S, and only once the background replacement has ended)."""
        if not self._missing() or self._bringing_back is None or self._bringing_back.is_alive():
            return False
        now = self.clock.now()
        if not self._brought_back:
            if now - self._failed_at >= BRING_BACK_RETRY_S:
                self._bring_back(self._missing())
            return False
        if now - self._grow_checked < GROW_CHECK_EVERY_S:
            return False
        self._grow_checked = now
        try:
            self.cluster.agents(self.run.slices)
        except PodmanagerError:
            return False
        return True

    # ------------------------------------------------------------------ ledger

    def _pending_incident(self) -> IncidentRecord | None:
        last = self.ledger.incidents[-1] if self.ledger.incidents else None
        if last is not None and last.recover_s is None and last.attempt == self.run.attempt - 1:
            return last
        return None

    def _incident(self, attempt: int, incident: Incident, detected_at: float, monitor: HealthMonitor | None,
                  phases: dict[str, float]) -> IncidentRecord:
        healthy_until = monitor.last_healthy_check if monitor else None
        return IncidentRecord(
            attempt=attempt, cause=incident.cause.value, slices=sorted(incident.slices), detail=incident.detail,
            # The last healthy look can come after the failure was seen (a check in the same beat): 0, not negative.
            detected_at=detected_at, detect_s=max(0.0, detected_at - healthy_until) if healthy_until else None,
            recover_s=None, lost_steps=None, phases=phases, host=list(incident.host) if incident.host else None,
        )

    def _close_incident(self, record: IncidentRecord, result: AttemptResult) -> None:
        """Fill in what the next attempt tells: when it made its first step, from where."""
        previous = next((a for a in reversed(self.ledger.attempts[:-1]) if a.attempt == record.attempt), None)
        if result.first_step_time is not None:
            record.recover_s = result.first_step_time - record.detected_at
            record.phases["first_step"] = result.first_step_time - result.started
        if len(result.setup_already) < len(result.hosts):  # some host had the run to set up (not a prepared spare)
            record.phases["setup"] = result.setup_s
        if result.first_step is not None and previous is not None and previous.last_step is not None:
            record.lost_steps = max(0, previous.last_step - (result.first_step - 1))
        where = (f"resumed at step {result.first_step}" if result.first_step is not None
                 else "ran without reporting a step")  # a plain command reports none
        self.record(EventKind.RESUMED, f"attempt {result.attempt} {where}"
                    + (f", {record.lost_steps} step(s) lost" if record.lost_steps is not None else ""),
                    recover_s=record.recover_s, lost_steps=record.lost_steps)

    def _finish(self, status: str, reason: str | None) -> RunResult:
        if status == "cancelled":
            self.record(EventKind.RUN_CANCELLED, f"run {self.run_id} cancelled; every process of it is stopped")
        attempts = self.ledger.attempts
        if attempts:
            result = summarize(self.cluster.name, self.run_id, attempts, self.runner.logs.folder)
        else:
            result = RunResult.without_attempts(self.run_id, self.cluster.name, status,
                                                f"run {self.run_id} never started", str(self.runner.logs.folder))
        counts = self._recovery_state().counts
        result.status = status
        result.preemptions = counts[Cause.PREEMPTION]
        result.failures = counts[Cause.PROGRAM] + counts[Cause.INFRASTRUCTURE]
        result.hangs = counts[Cause.HANG]
        result.goodput = goodput(attempts, result.wall_s)
        result.badput = badput(attempts)
        result.setup_error = attempts[-1].setup_error if attempts else None
        result.incidents = list(self.ledger.incidents)
        if status == "cancelled":
            result.message = f"run {self.run_id} was cancelled"
        elif reason:
            result.message = f"{result.message}; {reason}"
        final = attempts[-1] if attempts else None
        if final is not None and final.last_step is not None:
            self.run.progress = self.run.progress.model_copy(update={"step": final.last_step, "loss": final.last_loss})
        self.run.status = status
        self.run.phase = Finished()
        self.run.result = result
        self.runner.logs.save_result(result)
        self._save()
        # No attempt will need them again.
        run_secrets.remove(self.cluster.name, self.run_id)
        shutil.rmtree(package.kept_folder(self.cluster.name, self.run_id), ignore_errors=True)
        return result

    # ------------------------------------------------------------------ state

    def _save(self) -> None:
        self.runs.save(self.run)  # also reads back whether a cancel was asked for

    def _recovery_state(self) -> RecoveryState:
        """What the budgets decide on, counted from the ledger's incidents."""
        return RecoveryState(started=self.run.created_at, now=self.clock.now(),
                             incidents=[classified(i) for i in self.ledger.incidents])

    def record(self, kind: EventKind, message: str, **data: Any) -> None:
        self.cluster.record(kind, message, run_id=self.run_id, **data)

    def _end_series(self, result: AttemptResult) -> None:
        """The attempt's last step ends its part of the metrics' series (a poll after the last save saw it)."""
        if result.last_step is not None and result.last_step_time is not None \
                and self._series_last != (result.attempt, result.last_step):
            self.runner.logs.append_progress(result.attempt, result.last_step, result.last_step_time, result.last_loss, {})
            self._series_last = (result.attempt, result.last_step)

    def _note_checkpoint(self, attempt: int, step: int, saved_at: float) -> None:
        """A checkpoint the program said is final, recorded once for the run's timeline. Two
        saved between one look and the next (under a second apart): the newer one only."""
        if self._checkpoint_noted == (attempt, step):
            return
        self._checkpoint_noted = (attempt, step)
        self.record(EventKind.CHECKPOINT_SAVED, f"checkpoint at step {step} saved", attempt=attempt, step=step,
                    saved_at=saved_at)

    def save_progress(self, gang: Gang) -> None:
        """A checkpoint the program saved, at once; the attempt's latest step (as its result
        will count it), at most once per PROGRESS_EVERY_S."""
        progress = combine(gang.hosts)
        if progress.checkpoint is not None:
            self._note_checkpoint(self.run.attempt, *progress.checkpoint)
        now = self.clock.now()
        if now - self._progress_saved < PROGRESS_EVERY_S:
            return
        self._progress_saved = now
        latest = progress.latest
        if latest is None:
            return
        if self._series_last != (self.run.attempt, latest.step):
            # The run's metrics over time, for the dashboard's charts (the record keeps the latest only).
            self.runner.logs.append_progress(self.run.attempt, latest.step, latest.time, latest.loss, latest.metrics)
            self._series_last = (self.run.attempt, latest.step)
        self.run.progress = RunProgress(step=latest.step, time=latest.time, loss=latest.loss,
                                        steps_per_s=progress.steps_per_s)
        self._save()


class _SupervisedMonitor:
    """The health monitor as the attempt runner sees it, plus what only the supervisor
    knows: a cancel asked for by a client, and the progress it keeps in the run's record."""

    def __init__(self, supervisor: RunSupervisor, monitor: HealthMonitor, gang: Gang):
        self.supervisor = supervisor
        self.monitor = monitor
        self.gang = gang

    def check(self) -> str | None:
        supervisor = self.supervisor
        supervisor.save_progress(self.gang)
        supervisor.spare_preparer.tick(supervisor.run.slices)
        if supervisor.runs.cancel_requested(supervisor.run_id):
            supervisor.run.cancel_requested = True
            return CANCELLED
        problem = self.monitor.check()
        if problem is None and supervisor.ready_to_grow():
            return GROW
        return problem


def _at_step(step: int | None, words: str = "at step") -> str:
    """' at step N' when the program reported a step; nothing when it reported none (a plain command)."""
    return f" {words} {step}" if step is not None else ""


def new_run(cluster: SupervisedCluster, workload: Workload, run_id: str, slices: list[int],
            checkpoint_dir: str | None, budgets: dict[str, int], *, warnings: list[str] | None = None) -> RunRecord:
    """The record a run starts from."""
    recorded = workload.model_copy(update={"env": run_secrets.redacted(workload.env)})
    return RunRecord(run_id=run_id, cluster=cluster.name, workload=recorded,
                     slices=slices, budgets=budgets, checkpoint_dir=checkpoint_dir, warnings=warnings or [])
