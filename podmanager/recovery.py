"""The run supervisor: attempt after attempt until the program finishes or a budget is spent.

Each attempt launches on every host of the run's slices with a fresh distributed
environment, under the health monitor. When it ends badly the failure is classified,
paid from its budget, and recovered from: a preemption deletes the lost slices at once
and creates them again through the reconcile loop (same zone first, the next zones on
capacity errors), waits for their hosts, and relaunches from the latest checkpoint.
Every step goes into the event log, and the run ends with a ledger of incidents.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from podmanager.classify import Cause, Incident, classify
from podmanager.errors import PodmanagerError
from podmanager.gang import Gang
from podmanager.health import HealthMonitor, SliceRef
from podmanager.recovery_policy import RecoveryPolicy, RecoveryState, quarantined
from podmanager.runs import (
    AttemptResult,
    AttemptRunner,
    OutputPrinter,
    RunResult,
    new_run_id,
    summarize,
)
from podmanager.workload import Workload

if TYPE_CHECKING:
    from podmanager.api import Cluster


@dataclass
class IncidentRecord:
    """One entry of the run's ledger."""

    attempt: int
    cause: str
    slices: list[int]
    detail: str
    detected_at: float
    detect_s: float | None  # from the last healthy check to detection: how late we could have been
    recover_s: float | None  # detection to the first step of the next attempt
    lost_steps: int | None
    phases: dict[str, float]  # seconds per phase: stop, delete, create, join, relaunch, first_step

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "slice": self.slices[0] if self.slices else None}


class RunSupervisor:
    def __init__(self, cluster: "Cluster", workload: Workload, *, printer: OutputPrinter | None = None,
                 policy: RecoveryPolicy | None = None, poll_interval_s: float = 0.25):
        self.cluster = cluster
        self.workload = workload
        self.policy = policy or RecoveryPolicy.from_spec(cluster.spec.recovery)
        self.run_id = new_run_id(workload)
        self.slice_indexes = workload.slices if workload.slices is not None else \
            [s.index for s in cluster.spec.slice_list()]
        self.runner = AttemptRunner(cluster.name, workload, self.run_id, simulated=cluster.spec.simulated,
                                    checkpoint_dir=self._checkpoint_dir(), printer=printer,
                                    poll_interval_s=poll_interval_s)
        self.incidents: list[IncidentRecord] = []

    def _checkpoint_dir(self) -> str | None:
        if self.workload.checkpoint_dir:
            return self.workload.checkpoint_dir
        if self.cluster.spec.simulated:  # every simulated host shares this machine's disk
            return str(self.cluster.run_dir(self.run_id) / "checkpoints")
        return None

    def run(self) -> RunResult:
        record = self.cluster._record
        state = RecoveryState(started=time.time())
        attempts: list[AttemptResult] = []
        pending: IncidentRecord | None = None
        stop_reason = None
        record("run_started", f"run {self.run_id}: {self.workload.display_name} on slice(s) {self.slice_indexes}",
               run_id=self.run_id)
        attempt = 0
        while True:
            agents = self._agents()
            relaunch_started = time.time()
            record("attempt_started", f"attempt {attempt} on {len(agents)} host(s)", run_id=self.run_id,
                   attempt=attempt)
            monitor_box: list[HealthMonitor] = []
            result = self.runner.run_attempt(agents, attempt, lambda gang: self._monitor(gang, monitor_box))
            attempts.append(result)
            if pending is not None:
                self._close_incident(pending, attempts[-2], result, relaunch_started)
                pending = None
            if result.status == "succeeded":
                record("run_succeeded", f"run {self.run_id} finished at step {result.last_step}", run_id=self.run_id)
                break
            monitor = monitor_box[0]
            incident = classify(monitor.observation(self._dead_nodes()))
            state.incidents.append(incident)
            state.now = time.time()
            detected_at = result.detected_at or result.ended
            record("incident", f"attempt {attempt}: {incident.cause.value}: {incident.detail}",
                   run_id=self.run_id, cause=incident.cause.value, slices=sorted(incident.slices))
            decision = self.policy.decide(state)
            if not decision.retry:
                stop_reason = decision.reason
                record("run_failed", f"run {self.run_id} stopped: {decision.reason}", run_id=self.run_id)
                self.cluster.delete_dead_slices()  # never leave a preempted slice holding quota
                self.incidents.append(self._incident(attempt, incident, detected_at, monitor, result, {}))
                break
            replace = sorted(set(incident.slices) | quarantined(state))
            phases = {"stop": result.ended - detected_at}
            phases.update(self._recover(replace, incident, decision.wait_s))
            pending = self._incident(attempt, incident, detected_at, monitor, result, phases)
            self.incidents.append(pending)
            attempt += 1
        return self._result(attempts, state, stop_reason)

    # ------------------------------------------------------------------ pieces

    def _monitor(self, gang: Gang, box: list[HealthMonitor]) -> HealthMonitor:
        refs = [SliceRef(i, zone, name) for i, zone, name in self.cluster.slice_locations(self.slice_indexes)]
        health = self.cluster.spec.health
        monitor = HealthMonitor(self.cluster.cloud, refs, gang, interval_s=health.interval_s,
                                hang_timeout_s=self.workload.hang_timeout_s or health.hang_timeout_s,
                                on_event=self.cluster._record)
        box.append(monitor)
        return monitor

    def _agents(self) -> list:
        """The run's host agents; if some are missing (a slice lost between attempts), the
        cluster is healed first: dead slices replaced, every host joined."""
        try:
            return self.cluster.agents(self.slice_indexes)
        except PodmanagerError as missing:
            self.cluster._record("healing", f"before launching: {missing.message}; bringing the slices back",
                                 run_id=self.run_id)
            self.cluster.delete_dead_slices()
            self.cluster.up()  # recreates what is missing and waits for every host
            return self.cluster.agents(self.slice_indexes)

    def _dead_nodes(self) -> set[tuple[int, int]]:
        return {(h.slice_index, h.worker_id) for h in self.cluster.dead_hosts()}

    def _recover(self, replace: list[int], incident: Incident, wait_s: float) -> dict[str, float]:
        phases: dict[str, float] = {}
        if wait_s:
            self.cluster._record("backoff", f"waiting {wait_s:.0f}s before the next attempt", run_id=self.run_id)
            time.sleep(wait_s)
        if replace:
            started = time.time()
            self.cluster.replace_slices(replace, reason=incident.cause.value, phases=phases)
            phases["replace_total"] = time.time() - started
        return phases

    def _incident(self, attempt: int, incident: Incident, detected_at: float, monitor: HealthMonitor,
                  result: AttemptResult, phases: dict[str, float]) -> IncidentRecord:
        healthy_until = monitor.last_healthy_check
        return IncidentRecord(
            attempt=attempt, cause=incident.cause.value, slices=sorted(incident.slices), detail=incident.detail,
            detected_at=detected_at,
            detect_s=(detected_at - healthy_until) if healthy_until else None,
            recover_s=None, lost_steps=None, phases=phases,
        )

    def _close_incident(self, record: IncidentRecord, previous: AttemptResult, result: AttemptResult,
                        relaunched: float) -> None:
        """Fill in what the next attempt tells: when it made its first step, from where."""
        previous_last = previous.last_step
        if result.first_step_time is not None:
            record.recover_s = result.first_step_time - record.detected_at
            record.phases["first_step"] = result.first_step_time - relaunched
        if result.first_step is not None and previous_last is not None:
            record.lost_steps = max(0, previous_last - (result.first_step - 1))
        self.cluster._record("resumed", f"attempt {result.attempt} resumed at step {result.first_step}"
                             + (f", {record.lost_steps} step(s) lost" if record.lost_steps is not None else ""),
                             run_id=self.run_id, recover_s=record.recover_s, lost_steps=record.lost_steps)

    def _result(self, attempts: list[AttemptResult], state: RecoveryState, stop_reason: str | None) -> RunResult:
        result = summarize(self.cluster.name, self.run_id, attempts, self.runner.logs.folder)
        counts = state.counts
        result.preemptions = counts[Cause.PREEMPTION]
        result.failures = counts[Cause.PROGRAM] + counts[Cause.INFRASTRUCTURE]
        result.hangs = counts[Cause.HANG]
        result.goodput = goodput(attempts, result.wall_s)
        result.incidents = [i.as_dict() for i in self.incidents]
        if stop_reason:
            result.message = f"{result.message}; {stop_reason}"
        self.runner.logs.save_result(result)
        return result


def goodput(attempts: list[AttemptResult], wall_s: float) -> float | None:
    """Productive step time over wall time: the steps that count (each final step once),
    at each attempt's own pace, divided by the run's wall time."""
    if wall_s <= 0:
        return None
    productive = 0.0
    kept_until: int | None = None  # steps after this were redone by a later attempt
    for attempt in reversed(attempts):
        if attempt.first_step is None or attempt.last_step is None or attempt.first_step_time is None:
            continue
        last = attempt.last_step if kept_until is None else min(attempt.last_step, kept_until)
        steps = last - attempt.first_step + 1
        if attempt.last_step > attempt.first_step and attempt.last_step_time is not None:
            pace = (attempt.last_step_time - attempt.first_step_time) / (attempt.last_step - attempt.first_step)
            productive += max(0, steps) * pace
        kept_until = attempt.first_step - 1
    return min(1.0, productive / wall_s)
