"""The supervisor on a fake cluster (the `SupervisedCluster` port), fake agents and the real
simulator and run store: classify, pay, replace, relaunch, and resume from its own record —
no Ray, no processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fake_hosts import Behaviour, FakeRef, FakeRemote, _Method, agents
from ray.exceptions import RayTaskError

from podmanager.api.run_handle import run_summary
from podmanager.attempts.logs import RunFolder
from podmanager.cloud.base import CLUSTER_LABEL, SLICE_LABEL, NodeRequest
from podmanager.core.clock import Clock, FakeClock, RealClock
from podmanager.core.event_data import payload
from podmanager.core.records import SliceRef
from podmanager.core.spec import parse_spec
from podmanager.core.workload import Workload
from podmanager.emulator.sim.cloud import SimCloud
from podmanager.state.run_records import RunStore
from podmanager.state.run_state import (
    Finished,
    Launching,
    Replacing,
    Running,
    RunPhase,
    SupervisorProcess,
)
from podmanager.supervision.supervisor import RunSupervisor, new_run
from podmanager.vm.environments import HostSetup
from podmanager.vm.host_wire import HostLaunch, RunSetup

ZONE = "sim-zone-a"


class FakeCluster:
    """Two one-host slices in the simulator; agents scripted per attempt."""

    def __init__(self, tmp_path: Path, script, *, clock: Clock | None = None, **recovery: Any):
        self.name = "c"
        self.spec = parse_spec({"name": "c", "backend": "simulated", "zones": [ZONE],
                                "health": {"interval_s": 0.01}, "recovery": {"backoff_s": 0.0, **recovery},
                                "slices": [{"accelerator": "v4-8", "count": 2}]})
        self.clock = clock or RealClock()
        self.cloud = SimCloud(clock=self.clock, create_latency_s=0.0, delete_latency_s=0.0)
        self.hosts = agents(script)
        self.events: list[tuple[str, dict]] = []
        self.messages: list[str] = []
        self.deleted: list[list[int]] = []
        self.restored = 0
        self.dropped: set[int] = set()  # slices an `up` of an edited spec removed
        self.folder = tmp_path
        for i in range(2):
            self._create(i)

    def _create(self, index: int) -> None:
        self.cloud.create_node(ZONE, f"c-s{index}", NodeRequest("v4-8", "rt", labels={
            CLUSTER_LABEL: "c", SLICE_LABEL: str(index)}))

    # -- the port
    def zone_nodes(self, zone: str, slot: int):
        return self.cloud.list_nodes(zone)

    def record(self, kind: str, message: str, slice_index: int | None = None, **data: Any) -> None:
        payload(kind, data)  # as the store checks it: each field of the kind's record, of its type
        self.events.append((kind, data))
        self.messages.append(message)

    def agents(self, slice_indexes):
        return [pair for pair in self.hosts if pair[0].slice_index in slice_indexes]

    def slice_locations(self, slice_indexes):
        return [SliceRef(i, ZONE, f"c-s{i}") for i in slice_indexes]

    def lost_hosts(self):
        return set()

    def heal(self):
        raise AssertionError("no host is ever missing here")

    def delete_dead_slices(self):
        return []

    def delete_slices(self, indexes, *, reason, since=None):
        self.deleted.append(list(indexes))
        for i in indexes:
            self.cloud.delete_node(ZONE, f"c-s{i}")
        for slot, agent in self.hosts:  # the slice's next VM has no notice
            if slot.slice_index in indexes:
                agent.notice = False

    def restore_slices(self, phases):
        self.restored += 1
        present = {n.name for n in self.cloud.list_nodes(ZONE)}
        for i in range(2):
            if f"c-s{i}" not in present:
                self._create(i)
        phases["create"] = phases["join"] = 0.0

    def dropped_slices(self, indexes):
        return sorted(set(indexes) & self.dropped)

    def kinds(self) -> list[str]:
        return [k for k, _ in self.events]


@pytest.fixture
def runs():
    return RunStore()


def submit(cluster: FakeCluster, runs: RunStore, run_id: str = "run-1", **budgets: int) -> str:
    workload = Workload(command=["train"], working_dir=None)
    runs.create(new_run(cluster, workload, run_id, [0, 1], "/ck", budgets))
    return run_id


def supervise(cluster: FakeCluster, runs: RunStore, run_id: str = "run-1", *, poll_interval_s: float = 0.0):
    return RunSupervisor(cluster, runs, run_id, poll_interval_s=poll_interval_s, remote=FakeRemote()).supervise()


def test_a_program_failure_relaunches_on_the_same_slices_and_never_replaces_one(tmp_path, runs):
    cluster = FakeCluster(tmp_path, lambda s, attempt: Behaviour(
        polls=2, exit_code=1 if attempt == 0 and s.slice_index == 0 else 0))
    result = supervise(cluster, runs, submit(cluster, runs))
    assert result.status == "succeeded" and (result.attempts, result.failures) == (2, 1)
    assert cluster.deleted == [] and cluster.restored == 0
    assert runs.get("run-1").status == "succeeded"
    assert result.incidents[0].cause == "program-failure"


def test_a_preemption_replaces_the_lost_slice_once_and_resumes(tmp_path, runs):
    cluster = FakeCluster(tmp_path, lambda s, attempt: Behaviour(polls=200 if attempt == 0 else 2,
                                                                 first_step=1 if attempt == 0 else 41))
    cluster.cloud.preempt(ZONE, "c-s1")
    result = supervise(cluster, runs, submit(cluster, runs))
    assert result.status == "succeeded" and (result.attempts, result.preemptions) == (2, 1)
    assert cluster.deleted == [[1]] and cluster.restored == 1
    [incident] = result.incidents
    assert incident.cause == "preemption" and incident.slices == [1]
    assert incident.recover_s is not None
    assert [a.started[-1]["PODMANAGER_ATTEMPT"] for _, a in cluster.hosts] == ["1", "1"]


def test_a_program_that_exits_0_on_a_notices_sigterm_resumes_on_the_replacement(tmp_path, runs):
    """JAX's examples save a checkpoint on SIGTERM and exit 0: after a notice that is a stop for
    the notice, not the run's end (issue 43: 9,986 steps were dropped as `succeeded`)."""
    cluster = FakeCluster(tmp_path, lambda s, attempt: Behaviour(polls=200, on_sigterm=0) if attempt == 0
                          else Behaviour(polls=2, first_step=15))
    cluster.hosts[0][1].notice = True
    result = supervise(cluster, runs, submit(cluster, runs))
    assert result.status == "succeeded" and (result.attempts, result.preemptions) == (2, 1)
    stopped, resumed = result.attempt_log
    assert {h.exit_code for h in stopped.hosts} == {0} and stopped.status == "failed"
    assert "SIGTERM" in stopped.failure and resumed.first_step == 15
    [incident] = result.incidents
    assert incident.cause == "preemption" and incident.slices == [0]
    assert cluster.deleted == [[0]] and cluster.restored == 1


def test_a_program_that_said_it_was_done_ends_the_run_however_a_notice_stopped_it(tmp_path, runs):
    cluster = FakeCluster(tmp_path, lambda s, attempt: Behaviour(polls=200, on_sigterm=0, says_done=True))
    cluster.hosts[0][1].notice = True
    result = supervise(cluster, runs, submit(cluster, runs))
    assert result.status == "succeeded" and (result.attempts, result.preemptions) == (1, 0)
    assert cluster.deleted == [] and cluster.hosts[0][1].signals  # it was asked to stop, and was done


def test_a_spent_budget_stops_the_run_and_says_which(tmp_path, runs):
    cluster = FakeCluster(tmp_path, lambda s, attempt: Behaviour(polls=1, exit_code=3))
    result = supervise(cluster, runs, submit(cluster, runs, max_failures=1))
    assert result.status == "failed" and result.attempts == 2
    assert "max_failures budget is spent" in result.message
    assert runs.get("run-1").status == "failed"


def test_a_supervisor_started_on_a_recovery_whose_delete_was_done_only_creates_and_relaunches(tmp_path, runs):
    cluster = FakeCluster(tmp_path, lambda s, attempt: Behaviour(polls=2))
    run_id = submit(cluster, runs)
    run = runs.get(run_id)  # as a killed supervisor left it: slice 1 deleted, not yet created
    run.status, run.attempt, run.supervisor = "recovering", 0, SupervisorProcess(starts=1)
    run.phase = Replacing(attempt=1, slices=[1], reason="preemption", deleted=True)
    runs.save(run)
    cluster.cloud.delete_node(ZONE, "c-s1")

    result = supervise(cluster, runs, run_id)
    assert result.status == "succeeded"
    assert cluster.deleted == [] and cluster.restored == 1  # the delete is not repeated
    assert [len(a.started) for _, a in cluster.hosts] == [1, 1]  # one relaunch
    assert cluster.hosts[0][1].started[0]["PODMANAGER_ATTEMPT"] == "1"
    assert "supervisor_restarted" in cluster.kinds() and "run_started" not in cluster.kinds()


def test_a_supervisor_started_on_a_running_attempt_reattaches_instead_of_launching(tmp_path, runs):
    cluster = FakeCluster(tmp_path, lambda s, attempt: Behaviour(polls=3))
    run_id = submit(cluster, runs)
    for _, agent in cluster.hosts:  # attempt 0 is running on every host, started by the killed supervisor
        agent.start_workload.remote(HostLaunch(run=RunSetup(run_id=run_id, workload=runs.get(run_id).workload), attempt=0,
                                                env={"PODMANAGER_ATTEMPT": "0"}))
    run = runs.get(run_id)
    run.status, run.supervisor = "running", SupervisorProcess(starts=1)
    run.phase = Running(attempt=0, started=1.0)
    runs.save(run)

    result = supervise(cluster, runs, run_id)
    assert result.status == "succeeded" and result.attempts == 1
    assert [len(a.started) for _, a in cluster.hosts] == [1, 1]  # never a second copy
    assert "reattached" in cluster.kinds() and "attempt_started" not in cluster.kinds()


def test_a_supervisor_started_on_an_attempt_its_hosts_lost_keeps_the_lines_written_meanwhile_then_relaunches(
        tmp_path, runs):
    """The head went down with the agents; the programs ran on for a while and wrote lines no
    supervisor collected. They are read from the hosts' output files before the relaunch."""
    cluster = FakeCluster(tmp_path, lambda s, attempt: Behaviour(polls=2, lines=["relaunched"]))
    run_id = submit(cluster, runs)
    folder = RunFolder("c", run_id)
    run = runs.get(run_id)
    run.status, run.supervisor = "running", SupervisorProcess(starts=1)
    base = {}
    for host, agent in cluster.hosts:  # each host's log held one earlier attempt, then "step 1" of this one
        folder.append(host, b"attempt before\n")
        base[host.label] = folder.size(host)
        folder.append(host, b"step 1\n")
        agent.files[(run_id, 0)] = b"step 1\nstep 2\nstep 3\n"  # the file on the host: two lines more
    run.phase = Running(attempt=0, started=1.0, log_base=base)
    runs.save(run)
    # Host 1's agent cannot read its file: its lines stay on it, and the run goes on.
    cluster.hosts[1][1].left_output = _Method(lambda *_: FakeRef(error=RayTaskError("left_output", "", OSError())))

    result = supervise(cluster, runs, run_id)
    assert result.status == "succeeded"
    kept = {0: "step 1\nstep 2\nstep 3\n", 1: "step 1\n"}
    for host, agent in cluster.hosts:
        assert folder.path(host).read_text() == f"attempt before\n{kept[host.slice_index]}relaunched\n"
        assert len(agent.started) == 1 and agent.started[0]["PODMANAGER_ATTEMPT"] == "0"
    assert cluster.kinds().count("warning") == 1


@pytest.mark.parametrize("steps, said", [(True, "run run-1 finished at step 3"), (False, "run run-1 finished")])
def test_a_finished_run_names_its_last_step_only_when_it_reported_one(tmp_path, runs, steps, said):
    cluster = FakeCluster(tmp_path, lambda s, attempt: Behaviour(polls=3, reports_steps=steps))
    assert supervise(cluster, runs, submit(cluster, runs)).status == "succeeded"
    assert cluster.messages[cluster.kinds().index("run_succeeded")] == said  # never "at step None"


def test_a_cancel_stops_every_host_and_ends_the_run_as_cancelled(tmp_path, runs):
    def started_then_cancelled(s, attempt):  # a client cancels while the program runs
        runs.request_cancel("run-1")
        return Behaviour(polls=10_000)

    cluster = FakeCluster(tmp_path, started_then_cancelled)
    result = supervise(cluster, runs, submit(cluster, runs))
    assert result.status == "cancelled" and runs.get("run-1").status == "cancelled"
    assert all(agent.stops for _, agent in cluster.hosts)  # stopped on every host
    # A cancel leaves the program the full grace to checkpoint on SIGTERM, not a failure's 2 s.
    assert all(agent.stops[-1] == 10.0 for _, agent in cluster.hosts)
    assert [h.exit_code for h in result.hosts] == [-15, -15]
    assert "run_cancelled" in cluster.kinds() and cluster.deleted == []


def test_a_finished_run_is_left_as_it_is(tmp_path, runs):
    cluster = FakeCluster(tmp_path, lambda s, attempt: Behaviour(polls=1))
    run_id = submit(cluster, runs)
    first = supervise(cluster, runs, run_id)
    again = supervise(cluster, runs, run_id)
    assert again == first
    assert [len(a.started) for _, a in cluster.hosts] == [1, 1]


def test_a_run_that_cannot_be_set_up_stops_as_bad_input_without_spending_a_budget(tmp_path, runs):
    cluster = FakeCluster(tmp_path, lambda s, attempt: Behaviour(polls=2))
    _, broken = cluster.hosts[1]
    broken.setup_report = HostSetup(False, 0.5, error="uv pip compile failed",
                                    lines=["error: tinydepx was not found in the package registry"])
    result = supervise(cluster, runs, submit(cluster, runs))
    assert result.status == "failed" and result.setup_error is not None
    assert result.setup_error.host == "slice-1/host-0" and "tinydepx" in result.setup_error.lines[0]
    assert (result.failures, result.preemptions, result.incidents) == (0, 0, [])
    assert cluster.deleted == [] and cluster.restored == 0
    assert all(agent.started == [] for _, agent in cluster.hosts)  # no program ran anywhere
    assert "setup_failed" in cluster.kinds() and "incident" not in cluster.kinds()


def test_every_launch_is_preceded_by_a_setup_and_a_reattach_by_none(tmp_path, runs):
    cluster = FakeCluster(tmp_path, lambda s, attempt: Behaviour(polls=2, exit_code=1 if attempt == 0 else 0))
    setups_done_at_start: list[int] = []  # how many setup_done events each program start came after
    for _, agent in cluster.hosts:
        launch = agent._start
        agent.start_workload = _Method(lambda *args, launch=launch: (
            setups_done_at_start.append(cluster.kinds().count("setup_done")), launch(*args))[1])
    result = supervise(cluster, runs, submit(cluster, runs))
    assert result.status == "succeeded" and result.attempts == 2
    assert all(agent.setups == ["run-1", "run-1"] for _, agent in cluster.hosts)
    assert set(result.badput) == {"setup", "startup", "recovery"}
    assert [k for k in cluster.kinds() if k.startswith("setup")].count("setup_done") == 2
    # Said when the setup is done, before the programs start (and print), not when the attempt ends.
    assert setups_done_at_start == [1, 1, 2, 2]


def behind(s, attempt, **options) -> Behaviour:
    """Slice 0's host reports step 11 and slice 1's step 9, from its first poll to its exit."""
    step = 11 - 2 * s.slice_index
    return Behaviour(first_step=step, last_step=step, **options)


def test_runs_and_the_summary_count_the_step_every_host_has_reached(tmp_path, runs, monkeypatch):
    shown: list[int | None] = []  # what `podmanager runs` shows after each write of the run's record
    save = runs.save

    def save_and_look(run) -> None:
        save(run)
        shown.append(run_summary(runs.get(run.run_id))["step"])

    monkeypatch.setattr(runs, "save", save_and_look)
    cluster = FakeCluster(tmp_path, lambda s, attempt: behind(s, attempt, polls=3))
    result = supervise(cluster, runs, submit(cluster, runs))
    assert result.status == "succeeded"
    # While the attempt ran (the supervisor's saved progress) and once it had finished alike.
    assert {step for step in shown if step is not None} == {result.metrics.last_step}
    assert result.metrics.last_step == result.attempt_log[0].last_step == 9
    assert result.metrics.first_step == 9  # the earliest first step of any host


def test_the_steps_lost_to_a_failure_count_from_the_step_every_host_had_reached(tmp_path, runs):
    def script(s, attempt):  # slice 1's host fails at step 9; the relaunch resumes at step 10
        if attempt == 0:
            return behind(s, attempt, polls=2 if s.slice_index == 1 else 100, exit_code=s.slice_index)
        return Behaviour(polls=2, first_step=10)

    cluster = FakeCluster(tmp_path, script)
    result = supervise(cluster, runs, submit(cluster, runs))
    assert result.status == "succeeded" and result.attempt_log[0].last_step == 9
    [incident] = result.incidents
    assert incident.cause == "program-failure" and incident.lost_steps == 0


def test_a_slice_an_edited_spec_took_is_never_created_again_and_the_run_stops_saying_why(tmp_path, runs):
    def spec_edited_while_running(s, attempt):  # `up --force` of a spec without slice 1, while attempt 0 runs
        if s.slice_index == 1:
            cluster.dropped = {1}
            cluster.cloud.delete_node(ZONE, "c-s1")
        return Behaviour(polls=10_000)

    cluster = FakeCluster(tmp_path, spec_edited_while_running)
    result = supervise(cluster, runs, submit(cluster, runs))
    assert result.status == "failed" and "slice(s) [1] of the run are no longer in the cluster's spec" in result.message
    assert cluster.deleted == [] and cluster.restored == 0  # not taken for a preemption: nothing replaced
    assert (result.preemptions, result.failures) == (0, 0)  # and no budget paid
    assert all(agent.stops for _, agent in cluster.hosts)


# ---------------------------------------------------------------- every phase, and a restart in each

PhaseKey = tuple[str, int | None, bool]


def phase_key(phase: RunPhase) -> PhaseKey:
    """A phase as far as the path through the phases goes: its kind, its attempt and where
    in it the supervisor was (a launch begun, a delete done)."""
    match phase:
        case Launching() | Running():
            return phase.name, phase.attempt, phase.started is not None
        case Replacing():
            return phase.name, phase.attempt, phase.deleted
        case Finished():
            return phase.name, None, False


class Killed(BaseException):
    """The supervisor's process dies (a SIGKILL, its node lost): nothing after it runs."""


def preempted_in_attempt_0(cluster_box: list[FakeCluster]):
    def script(s, attempt):  # slice 1 is preempted as attempt 0 starts on it; attempt 1 finishes
        if attempt == 0 and s.slice_index == 1:
            cluster_box[0].cloud.preempt(ZONE, "c-s1")
        return Behaviour(polls=10_000 if attempt == 0 else 3)
    return script


def walk(tmp_path: Path, runs: RunStore, run_id: str, kill_at: PhaseKey | None):
    """A run whose slice 1 is preempted in attempt 0, supervised on a fake clock; with
    `kill_at`, its supervisor dies right after it first writes that phase, and a new one
    carries on from the record. The phases written, in order, and the run's result."""
    box: list[FakeCluster] = []
    cluster = FakeCluster(tmp_path, preempted_in_attempt_0(box), clock=FakeClock())
    box.append(cluster)
    submit(cluster, runs, run_id)
    written: list[PhaseKey] = []
    stops = {id(agent): agent.stop_workload for _, agent in cluster.hosts}
    save = runs.save

    def save_and_maybe_die(run) -> None:
        save(run)
        key = phase_key(run.phase)
        if written and written[-1] == key:
            return
        written.append(key)
        if key == kill_at and written.count(key) == 1:
            for _, agent in cluster.hosts:  # a dead supervisor stops nothing: its programs run on
                agent.stop_workload = _NoStop()
            raise Killed()

    runs.save = save_and_maybe_die  # type: ignore[method-assign]
    try:
        result = supervise(cluster, runs, run_id, poll_interval_s=0.01)
    except Killed:
        for _, agent in cluster.hosts:
            agent.stop_workload = stops[id(agent)]
        result = supervise(cluster, runs, run_id, poll_interval_s=0.01)
    finally:
        runs.save = save  # type: ignore[method-assign]
    return cluster, written, result


class _NoStop:
    def remote(self, run_id: str, grace_s: float) -> FakeRef:
        return FakeRef(None)


PATH = [("launching", 0, False), ("launching", 0, True), ("running", 0, True), ("replacing", 1, False),
        ("replacing", 1, True), ("launching", 1, False), ("launching", 1, True), ("running", 1, True),
        ("finished", None, False)]


def test_a_preempted_run_goes_through_every_phase_in_order(tmp_path, runs):
    cluster, written, result = walk(tmp_path, runs, "run-1", kill_at=None)
    assert written == PATH
    assert result.status == "succeeded" and (result.attempts, result.preemptions) == (2, 1)
    assert "supervisor_restarted" not in cluster.kinds()


@pytest.mark.parametrize("kill_at", PATH, ids=lambda key: "-".join(str(part) for part in key))
def test_a_supervisor_killed_in_any_phase_is_carried_on_by_the_next_without_doing_anything_twice(
        tmp_path, runs, kill_at):
    cluster, written, result = walk(tmp_path, runs, "run-1", kill_at=kill_at)
    assert written == PATH  # the same path, whichever phase the first supervisor died in
    assert result.status == "succeeded" and (result.attempts, result.preemptions, result.failures) == (2, 1, 0)
    assert cluster.deleted == [[1]] and cluster.restored == 1  # the lost slice replaced once
    for _, agent in cluster.hosts:  # one launch per attempt on every host, never a second copy
        assert [env["PODMANAGER_ATTEMPT"] for env in agent.started] == ["0", "1"]
    record = runs.get("run-1")
    assert record.status == "succeeded" and isinstance(record.phase, Finished)
    causes = [i.cause for i in record.ledger.incidents]
    assert [c for c in causes if c != "supervisor-restart"] == ["preemption"]  # each incident once
    # The restart itself, once, paid by no budget (none when the first had finished the run).
    assert causes.count("supervisor-restart") == (0 if kill_at[0] == "finished" else 1)
    if kill_at != PATH[-1]:  # a supervisor killed once the run had finished leaves nothing to carry on
        assert cluster.kinds().count("supervisor_restarted") == 1


def test_a_degraded_slice_is_waited_for_then_replaced_as_an_infrastructure_incident(tmp_path, runs):
    """`degrade:1:UNHEALTHY_MAINTENANCE` (as `podmanager sim inject` sends it) as attempt 0 starts:
    the supervisor's health check says so, waits the bounded wait out on its fake clock, then
    replaces the slice without paying the preemption budget."""
    from podmanager.cloud.base import BOUNDED_WAIT_S
    from podmanager.core.faults import parse

    box: list[FakeCluster] = []

    def script(s, attempt):
        if attempt == 0 and s.slice_index == 1:
            parse("degrade:1:UNHEALTHY_MAINTENANCE").apply(box[0].cloud, cluster="c")
        return Behaviour(polls=10_000 if attempt == 0 else 3)

    cluster = FakeCluster(tmp_path, script, clock=FakeClock())
    box.append(cluster)
    started = cluster.clock.now()
    result = supervise(cluster, runs, submit(cluster, runs), poll_interval_s=1.0)
    assert result.status == "succeeded" and (result.attempts, result.preemptions) == (2, 0)
    [incident] = result.incidents
    assert incident.cause == "infrastructure" and incident.slices == [1]
    assert cluster.deleted == [[1]] and cluster.kinds().count("slice_unwell") == 1
    assert BOUNDED_WAIT_S <= cluster.clock.now() - started < BOUNDED_WAIT_S + 60


def test_the_runs_metrics_over_time_are_kept_in_its_folder_for_the_dashboard(tmp_path, runs, monkeypatch):
    from podmanager.supervision import supervisor

    monkeypatch.setattr(supervisor, "PROGRESS_EVERY_S", 0.0)  # each poll's step, not one a second
    cluster = FakeCluster(tmp_path, lambda s, attempt: Behaviour(polls=6, first_step=1))
    result = supervise(cluster, runs, submit(cluster, runs))
    points, _ = RunFolder("c", "run-1").read_progress(0, max_points=100)
    steps = [p["step"] for p in points]
    assert len(steps) >= 3 and steps == sorted(set(steps)) and steps[-1] == result.metrics.last_step
    assert all(p["attempt"] == 0 and p["loss"] == pytest.approx(1.0 / p["step"]) for p in points)


def test_each_checkpoint_the_program_saves_is_recorded_once_with_its_step_and_time(tmp_path, runs):
    # One step per poll, a checkpoint every 2 steps; attempt 0 is preempted-like (fails) after step 5,
    # attempt 1 resumes at step 4 and ends at step 7.
    def script(s, attempt):
        if attempt == 0:
            return Behaviour(polls=5, first_step=1, checkpoint_every=2, exit_code=1 if s.slice_index == 0 else 0)
        return Behaviour(polls=4, first_step=4, checkpoint_every=2)

    cluster = FakeCluster(tmp_path, script)
    result = supervise(cluster, runs, submit(cluster, runs))
    assert result.status == "succeeded"
    saved = [(data["attempt"], data["step"], data["saved_at"]) for kind, data in cluster.events if kind == "checkpoint_saved"]
    assert saved == [(0, 2, 1002.5), (0, 4, 1004.5), (1, 4, 1004.5), (1, 6, 1006.5)]
    assert result.attempt_log[-1].checkpoint_step == 6
