"""The run supervisor: attempt after attempt until the program finishes, a budget is spent
or the run is cancelled — resumable at every step.

Each attempt launches on every host of the run's slices with a fresh distributed
environment, under the health monitor (`attempt_launch.py`). When it ends badly the failure
is classified (`classify.py`) and the supervisor carries out what the pure recovery plan
decides (`recovery_plan.py`): stop, swap ready hot spares in (`spare_swap.py`), go on with
the slices left while the lost ones are made again (`grow_back.py`), replace the lost slices
(delete them, create them again, wait for their hosts) or relaunch, from the latest checkpoint.

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

import logging
import os
import shutil
from pathlib import Path
from typing import Any

from podmanager.attempts import package
from podmanager.attempts.attempt import CANCELLED, GROW, AttemptRunner
from podmanager.attempts.gang import Gang
from podmanager.attempts.remote import RAY, Remote
from podmanager.attempts.results import OutputPrinter
from podmanager.core.errors import PodmanagerError
from podmanager.core.events import EventKind
from podmanager.core.run_results import AttemptResult, RunResult
from podmanager.core.workload import Workload
from podmanager.runtime.replica_protocol import ENV_SERVICE_ID
from podmanager.serving.router import ReplicaLoss
from podmanager.state import run_secrets, service_tokens
from podmanager.state.run_records import RunRecord, RunStore
from podmanager.state.run_state import (
    Finished,
    Launching,
    Replacing,
    Running,
    SupervisorProcess,
)
from podmanager.supervision import ledger, recovery_plan
from podmanager.supervision.attempt_launch import AttemptLauncher
from podmanager.supervision.classify import Cause, Incident, classify, finished
from podmanager.supervision.grow_back import GrowBack
from podmanager.supervision.health import HealthMonitor
from podmanager.supervision.policy import RecoveryPolicy, RecoveryState
from podmanager.supervision.ports import SupervisedCluster
from podmanager.supervision.progress_keeper import ProgressKeeper
from podmanager.supervision.recovery_plan import Failure, RunSlices
from podmanager.supervision.spare_preparation import SparePreparer
from podmanager.supervision.spare_swap import SpareSwap

# An attempt's failure when its program exited 0 after a notice's SIGTERM without saying it was done.
STOPPED_FOR_NOTICE = ("exited after the preemption notice's SIGTERM without saying it was done (report_progress's "
                      "done or total_steps): stopped for the notice")
PROGRESS_EVERY_S = 1.0  # how often the latest step goes into the run's record

log = logging.getLogger(__name__)


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
        self.spare_swap = SpareSwap(cluster, runs, self.record)
        self.grow_back = GrowBack(cluster, run_id, self.record)  # an elastic run's lost slices made again
        self.launcher = AttemptLauncher(cluster, run, self.workload, self.runner, self.record, self._save)
        self.progress = ProgressKeeper(run, self.runner.logs, self.clock, self._save, PROGRESS_EVERY_S, self.record)

    # ------------------------------------------------------------------ the loop

    def supervise(self) -> RunResult:
        result = self._supervise()
        # A replacement still being made in the background is finished, not cut off mid-create:
        # the run's record already says it has ended, so no client waits for this.
        self.grow_back.join()
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
            self.ledger.incidents.append(ledger.restart_record(self.run.attempt, self.clock.now()))
        self._save()
        if self._missing():  # carrying on from a shrunk attempt: its lost slices are still to be made
            self.grow_back.start(self._missing(), self._last_incident_at())
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
        """Launch attempt N, or re-attach to it; its result and the health monitor that watched it."""
        monitor_box: list[HealthMonitor] = []
        result = self.launcher.run_attempt(current, lambda gang: self._monitor(gang, monitor_box))
        self.progress.end(result)
        self.ledger.attempts.append(result)
        self._close_incident(result)
        self._save()
        return result, monitor_box[0] if monitor_box else None

    def _after_failure(self, result: AttemptResult, monitor: HealthMonitor | None) -> str | None:
        """Classify, pay from the budget, and carry out the recovery plan: None, or why the run stops."""
        dropped = self._dropped()
        if dropped is not None:  # not a preemption: nothing to pay, nothing to replace
            return dropped
        incident = classify(monitor.observation(self.cluster.lost_hosts())) if monitor else \
            Incident(Cause.INFRASTRUCTURE, frozenset(), result.failure or "the attempt ended without a clear cause")
        detected_at = result.detected_at or result.ended
        self.record(EventKind.INCIDENT, f"attempt {result.attempt}: {incident.cause.value}: {incident.detail}",
                    cause=incident.cause.value, slices=sorted(incident.slices))
        self._tell_router(result.attempt, preempted=incident.cause is Cause.PREEMPTION)
        self.ledger.incidents.append(ledger.incident_record(
            result.attempt, incident, detected_at, monitor.last_healthy_check if monitor else None,
            {"stop": result.ended - detected_at}))
        plan = self._plan(Failure(result.attempt, incident))
        if isinstance(plan, recovery_plan.Stop):
            self.record(EventKind.RUN_FAILED, f"run {self.run_id} stopped: {plan.reason}")
            self._save()
            self.cluster.delete_dead_slices()  # never leave a preempted slice holding quota
            return plan.reason
        log.info("run %s after attempt %d: %s", self.run_id, result.attempt, plan.why)
        self.run.status = "recovering"
        match plan:
            case recovery_plan.Shrink():  # elastic: on at once with the slices left; the lost ones made again meanwhile
                self.run.attempt = plan.attempt
                self.run.phase = Launching(attempt=plan.attempt, on_slices=list(plan.on_slices))
                self._save()
                self.record(EventKind.RUN_SHRUNK, f"run {self.run_id}: slice(s) {list(plan.lost)} lost and no spare "
                            f"ready; attempt {plan.attempt} goes on at once on {len(plan.on_slices)} of its "
                            f"{len(self.run.slices)} slices {list(plan.on_slices)} while they are made again",
                            lost=list(plan.lost), slices=list(plan.on_slices))
                self.grow_back.start(list(plan.make_again), since=detected_at)
            case recovery_plan.Replace():
                self.run.phase = Replacing(attempt=plan.attempt, slices=list(plan.slices), reason=plan.reason)
            case recovery_plan.Relaunch():
                self.run.attempt = plan.attempt
                self.run.phase = Launching(attempt=plan.attempt,
                                           on_slices=None if plan.on_slices is None else list(plan.on_slices))
        self._save()
        if plan.wait_s:
            self.record(EventKind.BACKOFF, f"waiting {plan.wait_s:.0f}s before the next attempt")
            self.clock.sleep(plan.wait_s)
        return None

    def _plan(self, failure: Failure) -> recovery_plan.Action:
        """The recovery plan for this failure, the spare swaps it says carried out (recorded in
        the incident)."""
        started = self.clock.now()
        history = self._recovery_state()

        def plan(ready: list[int], swapped: dict[int, int]) -> recovery_plan.Plan:  # the run's slices as now
            run = RunSlices(tuple(self.run.slices), tuple(self._working()), self.workload.min_slices,
                            self.workload.parallelism)
            return recovery_plan.plan_recovery(failure, policy=self.policy, history=history, run=run,
                                               spec=self.cluster.spec, ready_spares=ready, swapped=swapped)

        decision, swapped = self.spare_swap.carry_out(self.run, recovery_plan.swappable(failure.incident), plan)
        if swapped:
            incident = self.ledger.incidents[-1]
            incident.swaps = [[lost, spare] for lost, spare in swapped.items()]
            incident.phases["swap"] = self.clock.now() - started
        return decision

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

    def _replace(self, phase: Replacing) -> None:
        """Delete the lost slices (once), create what is missing, wait for the hosts, and move
        on to launching the next attempt. Safe to run again from any point."""
        self.grow_back.join()  # one replacement at a time: it creates all that is missing
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
        stop = recovery_plan.stop_for_dropped(self.cluster.dropped_slices(self.run.slices))
        if stop is None:
            return None
        self.record(EventKind.RUN_FAILED, f"run {self.run_id} stopped: {stop.reason}")
        return stop.reason

    # ------------------------------------------------------------------ the attempt's watch

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

    def ready_to_grow(self) -> bool:
        """A shrunk attempt's lost slices are back (`grow_back.py`)."""
        return self.grow_back.ready(self._missing(), self.run.slices, self._last_incident_at())

    def _last_incident_at(self) -> float | None:
        return self.ledger.incidents[-1].detected_at if self.ledger.incidents else None

    # ------------------------------------------------------------------ ledger

    def _close_incident(self, result: AttemptResult) -> None:
        """The incident before this attempt, if any, gets what the attempt tells of its recovery."""
        record = ledger.pending(self.ledger.incidents, result.attempt)
        if record is None:
            return
        ledger.close(record, result, self.ledger.attempts[:-1])
        where = (f"resumed at step {result.first_step}" if result.first_step is not None
                 else "ran without reporting a step")  # a plain command reports none
        self.record(EventKind.RESUMED, f"attempt {result.attempt} {where}"
                    + (f", {record.lost_steps} step(s) lost" if record.lost_steps is not None else ""),
                    recover_s=record.recover_s, lost_steps=record.lost_steps)

    def _finish(self, status: str, reason: str | None) -> RunResult:
        if status == "cancelled":
            self.record(EventKind.RUN_CANCELLED, f"run {self.run_id} cancelled; every process of it is stopped")
        attempts = self.ledger.attempts
        result = ledger.run_result(self.cluster.name, self.run_id, status, reason, attempts, self.ledger.incidents,
                                   self.runner.logs.folder)
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
                             incidents=[ledger.classified(i) for i in self.ledger.incidents])

    def record(self, kind: EventKind, message: str, **data: Any) -> None:
        self.cluster.record(kind, message, run_id=self.run_id, **data)


class _SupervisedMonitor:
    """The health monitor as the attempt runner sees it, plus what only the supervisor
    knows: a cancel asked for by a client, and the progress it keeps in the run's record."""

    def __init__(self, supervisor: RunSupervisor, monitor: HealthMonitor, gang: Gang):
        self.supervisor = supervisor
        self.monitor = monitor
        self.gang = gang

    def check(self) -> str | None:
        supervisor = self.supervisor
        supervisor.progress.tick(self.gang)
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
