"""Elastic runs without Ray (`run --min-slices`): which slices a run goes on with after a loss
(supervision/policy.py), and the supervisor going on at once on the slices left while the
lost one is made again in the background, then growing back to all of them (on
test_supervisor's fake cluster)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from fake_hosts import Behaviour, FakeRemote
from test_supervisor import ZONE, FakeCluster

from podmanager.core.run_results import AttemptResult
from podmanager.core.workload import Workload
from podmanager.state.run_records import RunStore
from podmanager.state.run_state import Launching, Running, SupervisorProcess
from podmanager.supervision.ledger import badput
from podmanager.supervision.policy import slices_left
from podmanager.supervision.supervisor import RunSupervisor, new_run
from podmanager.vm.host_wire import HostLaunch, RunSetup

GATE_S = 30.0  # the longest a test waits for the other thread (a deadline, not a pause)


def test_the_slices_left_are_used_only_when_at_least_min_slices_are_left():
    assert slices_left([0, 1, 2], [1], min_slices=1) == [0, 2]
    assert slices_left([0, 1, 2], [1, 2], min_slices=1) == [0]
    assert slices_left([0, 1, 2], [1, 2], min_slices=2) is None  # too few left: wait for the replacement
    assert slices_left([0, 1], [1], min_slices=None) is None  # not elastic: nothing changes
    assert slices_left([0, 1], [], min_slices=1) is None  # nothing lost
    assert slices_left([0, 1], [5], min_slices=1) is None  # a slice the attempt does not run on
    assert slices_left([0, 1], [1], min_slices=1, fits=lambda slices: len(slices) == 2) is None  # a fixed mesh


def test_time_on_fewer_slices_is_its_own_badput_and_only_an_elastic_run_has_it():
    def attempt(number: int, started: float, ended: float, degraded: bool = False) -> AttemptResult:
        return AttemptResult(attempt=number, status="failed", started=started, ended=ended, hosts=[],
                             degraded=degraded)

    assert badput([attempt(0, 0.0, 10.0), attempt(1, 12.0, 52.5, degraded=True), attempt(2, 53.0, 60.0)])[
        "degraded"] == 40.5
    assert "degraded" not in badput([attempt(0, 0.0, 10.0), attempt(1, 12.0, 20.0)])


class SlowRestore(FakeCluster):
    """The fake cluster whose replacement of a lost slice waits until `gate` is opened: the
    cloud taking its time to create it."""

    def __init__(self, tmp_path: Path, script, **kw):
        super().__init__(tmp_path, script, **kw)
        self.gate = threading.Event()

    def restore_slices(self, phases):
        assert self.gate.wait(GATE_S), "the replacement was never let through"
        super().restore_slices(phases)


def elastic_run(runs: RunStore, cluster: FakeCluster, min_slices: int | None) -> None:
    workload = Workload(command=["train"], working_dir=None, min_slices=min_slices)
    runs.create(new_run(cluster, workload, "run-1", [0, 1], "/ck", {}))


def supervise(cluster: FakeCluster, runs: RunStore):
    return RunSupervisor(cluster, runs, "run-1", poll_interval_s=0.01, remote=FakeRemote()).supervise()


def started_attempts(agent) -> list[str]:
    return [env["PODMANAGER_ATTEMPT"] for env in agent.started]


def test_a_lost_slice_without_a_spare_goes_on_at_once_on_the_slice_left_and_grows_back(tmp_path):
    runs = RunStore()
    seen_while_shrunk: list[int] = []  # the replacements done as attempt 1 started

    def script(s, attempt):
        if attempt == 1:  # on slice 0 alone, before the lost slice is back: then the cloud may finish it
            seen_while_shrunk.append(cluster.restored)
            cluster.gate.set()
            return Behaviour(polls=100_000, first_step=21)  # goes on until it is told to grow
        if attempt == 2:
            return Behaviour(polls=3, first_step=40)
        return Behaviour(polls=100_000, first_step=1)

    cluster = SlowRestore(tmp_path, script)
    elastic_run(runs, cluster, min_slices=1)
    cluster.cloud.preempt(ZONE, "c-s1")
    result = supervise(cluster, runs)

    assert result.status == "succeeded" and (result.attempts, result.preemptions, result.failures) == (3, 1, 0)
    assert seen_while_shrunk == [0]  # slice 1 not yet made again: the run did not wait for it
    (_, on_0), (_, on_1) = cluster.hosts
    assert started_attempts(on_0) == ["0", "1", "2"] and started_attempts(on_1) == ["0", "2"]
    shrunk, grown = on_0.started[1], on_0.started[2]
    assert shrunk["PODMANAGER_NUM_SLICES"] == "1" and "MEGASCALE_NUM_SLICES" not in shrunk
    assert grown["PODMANAGER_NUM_SLICES"] == "2" and grown["MEGASCALE_NUM_SLICES"] == "2"
    assert 10.0 in on_0.stops  # the grow stops it gently: the program checkpoints on the SIGTERM
    assert cluster.deleted == [[1]] and cluster.restored == 1  # made again once, in the background
    kinds = cluster.kinds()
    assert kinds.index("run_shrunk") < kinds.index("slices_replaced") < kinds.index("run_grew")
    assert "slices_deleted" not in kinds  # no foreground replacement
    [incident] = result.incidents  # the grow is no incident and pays no budget
    assert incident.cause == "preemption" and incident.slices == [1] and incident.recover_s is not None
    assert [a.degraded for a in result.attempt_log] == [False, True, False]
    assert result.badput["degraded"] > 0
    assert runs.get("run-1").phase.name == "finished"


def test_with_fewer_slices_left_than_min_slices_the_run_waits_for_the_replacement_as_before(tmp_path):
    runs = RunStore()
    cluster = FakeCluster(tmp_path, lambda s, attempt: Behaviour(polls=100_000 if attempt == 0 else 2))
    elastic_run(runs, cluster, min_slices=2)
    cluster.cloud.preempt(ZONE, "c-s1")
    result = supervise(cluster, runs)
    assert result.status == "succeeded" and result.attempts == 2
    assert cluster.deleted == [[1]] and cluster.restored == 1
    assert "run_shrunk" not in cluster.kinds() and "slices_deleted" in cluster.kinds()
    assert [started_attempts(agent) for _, agent in cluster.hosts] == [["0", "1"], ["0", "1"]]
    assert "degraded" not in result.badput


def test_a_program_failure_while_shrunk_relaunches_on_the_slices_left(tmp_path):
    runs = RunStore()

    def script(s, attempt):
        if attempt == 1:  # shrunk: fails once, before the lost slice is back
            return Behaviour(polls=2, exit_code=3)
        if attempt == 2:  # still shrunk: now the cloud may finish the replacement
            cluster.gate.set()
            return Behaviour(polls=100_000)
        return Behaviour(polls=100_000 if attempt == 0 else 2)

    cluster = SlowRestore(tmp_path, script)
    elastic_run(runs, cluster, min_slices=1)
    cluster.cloud.preempt(ZONE, "c-s1")
    result = supervise(cluster, runs)
    assert result.status == "succeeded" and (result.preemptions, result.failures) == (1, 1)
    (_, on_0), (_, on_1) = cluster.hosts
    assert started_attempts(on_0) == ["0", "1", "2", "3"] and started_attempts(on_1) == ["0", "3"]
    assert cluster.restored == 1 and cluster.kinds().count("run_grew") == 1


def test_a_supervisor_started_on_a_shrunk_attempt_reattaches_and_still_brings_the_slice_back(tmp_path):
    runs = RunStore()
    cluster = FakeCluster(tmp_path, lambda s, attempt: Behaviour(polls=100_000 if attempt == 1 else 3))
    elastic_run(runs, cluster, min_slices=1)
    (_, on_0), (_, on_1) = cluster.hosts
    on_0.start_workload.remote(HostLaunch(run=RunSetup(run_id="run-1", workload=runs.get("run-1").workload), attempt=1,
                                          env={"PODMANAGER_ATTEMPT": "1"}))  # left running by the killed supervisor
    cluster.cloud.preempt(ZONE, "c-s1")  # lost, and not yet made again
    run = runs.get("run-1")
    run.status, run.attempt, run.supervisor = "running", 1, SupervisorProcess(starts=1)
    run.phase = Running(attempt=1, started=1.0, on_slices=[0])
    runs.save(run)

    result = supervise(cluster, runs)
    assert result.status == "succeeded"
    assert "reattached" in cluster.kinds() and "run_grew" in cluster.kinds()
    assert started_attempts(on_0) == ["1", "2"] and started_attempts(on_1) == ["2"]  # never a second copy
    assert cluster.restored == 1


def test_a_shrunk_phase_keeps_its_slices_in_the_record():
    runs = RunStore()
    cluster = FakeCluster.__new__(FakeCluster)
    cluster.name = "c"
    run = runs.create(new_run(cluster, Workload(command=["x"], working_dir=None, min_slices=1), "r1", [0, 1],
                              None, {}))
    run.phase = Launching(attempt=1, on_slices=[0])
    runs.save(run)
    again = runs.get("r1")
    assert again.phase == Launching(attempt=1, on_slices=[0]) and again.workload.min_slices == 1


@pytest.mark.parametrize("bad", [0, -1])
def test_min_slices_below_one_is_refused_naming_the_flag(bad):
    from podmanager.core.errors import SpecError

    with pytest.raises(SpecError, match="--min-slices"):
        Workload.from_argv(["train.py"], min_slices=bad)
