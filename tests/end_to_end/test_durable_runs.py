"""Durable runs on a dry-run cluster of real local Ray hosts: the supervisor lives next to the
Ray head, outlives the client that submitted the run, is restarted by Ray when its own process
is killed, and carries on from the run's durable record without a second copy of the program."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import psutil
import pytest
import ray
from cluster_specs import ONE_CHIP_PAIR
from homes import home_env
from local_reference import uninterrupted_run
from ray_fixtures import module_cluster
from sim_view import sim_nodes

from podmanager.api import Cluster, simulation
from podmanager.attempts.logs import RunFolder
from podmanager.core.clock import poll_until
from podmanager.core.errors import SpecError
from podmanager.core.workload import Workload
from podmanager.state.run_records import RunStore

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]
SPEC = ONE_CHIP_PAIR  # shared with test_inference.py and test_recovery.py
NAME = SPEC["name"]
STEPS = 150
# Steps take ~35 ms on one-chip hosts: a run that must still be going after a client's or a
# supervisor's end and a preemption takes this many.
LONG_STEPS = 400
# Where an uninterrupted run of LONG_STEPS ends: one local process with a device for each one-chip slice.
UNINTERRUPTED = uninterrupted_run("workloads/train_mlp.py", LONG_STEPS, devices=2)


home, cluster, _shared_home = module_cluster(SPEC)


# A run kept going until the test ends it steps every 20 ms, leaving the cores to the cluster.
PACED = ["--min-step-s", "0.02"]


def train_args(steps: int = STEPS) -> list[str]:
    return ["--steps", str(steps), "--checkpoint-every", "20", "--log-every", "1"]


def train(checkpoints: Path, steps: int = STEPS) -> Workload:
    return Workload(entrypoint="workloads/train_mlp.py", args=train_args(steps), working_dir=str(REPO),
                    parallelism="data", checkpoint_dir=str(checkpoints))


def wait_for(predicate: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.1) -> Any:
    return poll_until(predicate, timeout_s=timeout_s, interval_s=interval_s, what=what)


def latest_run(cluster: Cluster):
    return cluster.runs()[-1]


def step_of(run_id: str) -> int:
    run = RunStore().get(run_id)
    return (run.progress.step or 0) if run else 0


def supervisor_pid(run_id: str) -> int:
    return RunStore().get(run_id).supervisor.pid


def kill_supervisor(run_id: str) -> int:
    pid = supervisor_pid(run_id)
    os.kill(pid, signal.SIGKILL)
    return pid


def program_pids(cluster: Cluster, run_id: str) -> list[int]:
    agents = cluster.runtime.agents([0, 1])
    return [ray.get(agent.workload_status.remote(run_id), timeout=10).pid for _, agent in agents]


def logged_steps(cluster: Cluster, run_id: str) -> list[int]:
    text = (RunFolder(cluster.name, run_id).folder / "slice-0-host-0.log").read_text()
    return [int(m.group(1)) for m in re.finditer(r"^step (\d+) ", text, re.M)]


def run_events(cluster: Cluster, run_id: str, kind: str) -> list:
    return [e for e in cluster.events() if e.kind == kind and e.run_id == run_id]


def cli(*args: str, home: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "podmanager", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=180, env={**os.environ, **home_env(home)})


def test_killing_the_client_leaves_the_run_supervised_to_the_same_result(cluster, home, tmp_path):
    with UNINTERRUPTED.meanwhile() as uninterrupted:
        result = client_killed_then_preempted(cluster, home, tmp_path)
        reference = uninterrupted()
    assert result.metrics.last_step == LONG_STEPS
    assert result.metrics.last_loss == pytest.approx(reference, abs=1e-6)


def client_killed_then_preempted(cluster, home, tmp_path):
    """A run whose client is SIGKILLed, then one of its slices preempted: its result."""
    client = subprocess.Popen(
        [sys.executable, "-m", "podmanager", "run", "-c", NAME, "--working-dir", str(REPO), "--parallelism", "data",
         "--checkpoint-dir", str(tmp_path / "interrupted"), "workloads/train_mlp.py", *train_args(LONG_STEPS)],
        cwd=REPO, env={**os.environ, **home_env(home)}, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        run_id = wait_for(lambda: [r.run_id for r in cluster.runs() if step_of(r.run_id) >= 20], 120,
                          "the client's run to step")[0]
    finally:
        client.kill()  # SIGKILL: no goodbye
        client.wait()
    stepping_at = step_of(run_id)
    wait_for(lambda: step_of(run_id) > stepping_at + 5, 30, "the program to keep stepping without its client")

    listed = json.loads(cli("runs", "-c", NAME, "--json", home=home).stdout)
    assert [r["status"] for r in listed if r["run_id"] == run_id] == ["running"]

    simulation.preempt(cluster.runtime, 1)  # nobody is watching from a terminal: the supervisor recovers it
    attached = cli("attach", run_id, "-c", NAME, home=home)
    assert attached.returncode == 0, attached.stdout + attached.stderr
    assert f"run {run_id} succeeded" in attached.stdout
    assert "attempts 2, preemptions 1" in attached.stdout

    return cluster.run_handle(run_id).wait(timeout_s=10)


def test_a_killed_supervisor_reattaches_and_one_killed_during_a_recovery_finishes_it_exactly_once(cluster, home,
                                                                                                  tmp_path):
    handle = cluster.submit(train(tmp_path / "ck", steps=LONG_STEPS))
    wait_for(lambda: step_of(handle.run_id) >= 10, 120, "the first steps")
    pids_before = program_pids(cluster, handle.run_id)
    killed = kill_supervisor(handle.run_id)

    wait_for(lambda: run_events(cluster, handle.run_id, "reattached"), 60, "the restarted supervisor to re-attach")
    assert supervisor_pid(handle.run_id) != killed
    assert not psutil.pid_exists(killed)
    assert program_pids(cluster, handle.run_id) == pids_before  # the same processes, not a relaunch
    assert RunStore().get(handle.run_id).attempt == 0

    # Still supervised: a preemption after the restart is recovered, and a supervisor killed
    # between the lost slice's delete and the relaunch finishes the recovery exactly once.
    stepping_at = step_of(handle.run_id)
    wait_for(lambda: step_of(handle.run_id) > stepping_at, 30, "progress seen by the restarted supervisor")
    simulation.preempt(cluster.runtime, 1)  # slice 0 keeps the whole output of attempt 0
    wait_for(lambda: run_events(cluster, handle.run_id, "slices_deleted"), 60, "the lost slice to be deleted")
    kill_supervisor(handle.run_id)

    result = handle.wait(timeout_s=200)
    assert result.status == "succeeded", result.message
    assert (result.attempts, result.preemptions) == (2, 1)
    assert len(run_events(cluster, handle.run_id, "supervisor_restarted")) == 2
    assert len(run_events(cluster, handle.run_id, "slices_replaced")) == 1
    assert len(run_events(cluster, handle.run_id, "attempt_started")) == 2  # one relaunch
    deleted_at = run_events(cluster, handle.run_id, "slices_deleted")[0].id
    creates = [e for e in cluster.events(after_id=deleted_at) if e.kind == "slice_creating" and e.slice_index == 1]
    assert len(creates) == 1  # one replacement slice
    assert sorted(n.name for n in sim_nodes("podmanager-sim")) == [f"{NAME}-s0", f"{NAME}-s1"]
    steps = logged_steps(cluster, handle.run_id)
    # Attempt 1 resumes from a checkpoint: where the steps go back (or, resumed right after one, nowhere).
    restart = next((i for i in range(1, len(steps)) if steps[i] <= steps[i - 1]), len(steps))
    # Output kept across the supervisor's restart: every step of attempt 0 once, in order.
    assert steps[:restart] == list(range(1, steps[restart - 1] + 1)) and steps[restart - 1] > stepping_at
    # What XLA compiled went to the cluster's compile cache, which every simulated host shares.
    assert list((home / "clusters" / NAME / "jax-cache").glob("jit_*")), "nothing in the cluster's compile cache"


def test_a_missing_program_is_refused_before_anything_starts(cluster, home):
    before = len(cluster.runs())
    done = cli("run", "-c", NAME, "workloads/nope.py", home=home)
    assert done.returncode == 2
    assert "workloads/nope.py is not a file in the working dir" in done.stderr
    assert len(cluster.runs()) == before  # nothing submitted, so nothing retried or replaced


def interrupted_client(cluster: Cluster, home: Path, folder: Path,
                       times: int) -> tuple[subprocess.CompletedProcess, str]:
    """`podmanager run` of a long training run, Ctrl-C pressed `times` once it steps."""
    before = {r.run_id for r in cluster.runs()}
    client = subprocess.Popen(
        [sys.executable, "-m", "podmanager", "run", "-c", NAME, "--working-dir", str(REPO), "--checkpoint-dir",
         str(folder / f"ck{times}"), "workloads/train_mlp.py", *train_args(100_000), *PACED],
        cwd=REPO, env={**os.environ, **home_env(home)}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    run_id = wait_for(lambda: [r.run_id for r in cluster.runs() if r.run_id not in before
                               and step_of(r.run_id) >= 3], 120, "the run to step")[0]
    for _ in range(times):
        client.send_signal(signal.SIGINT)
        time.sleep(0.3)  # two key presses, a moment apart
    out, _ = client.communicate(timeout=90)
    return subprocess.CompletedProcess(client.args, client.returncode, out), run_id


def stopped(pids: list[int]) -> bool:
    return not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in pids)


@pytest.mark.spends_cluster  # it downs the cluster
def test_a_run_holds_its_slices_until_cancelled_ctrl_c_detaches_or_cancels_and_down_cancels_it_first(
        cluster, home, tmp_path):
    # --detach returns once the run is submitted; the run holds its slices until it is cancelled.
    started = time.monotonic()
    done = cli("run", "-c", NAME, "--detach", "--json", "--working-dir", str(REPO), "--checkpoint-dir",
               str(tmp_path / "first"), "workloads/train_mlp.py", *train_args(100_000), *PACED, home=home)
    assert done.returncode == 0, done.stderr
    first = cluster.run_handle(json.loads(done.stdout)["run_id"])
    assert time.monotonic() - started < 30
    with pytest.raises(SpecError, match=f"busy with run {first.run_id}"):
        cluster.submit(train(tmp_path / "second"))
    wait_for(lambda: step_of(first.run_id) >= 5, 120, "the detached run to step")
    pids = program_pids(cluster, first.run_id)
    assert first.cancel(timeout_s=60).status == "cancelled"
    statuses = [ray.get(agent.workload_status.remote(first.run_id), timeout=10)
                for _, agent in cluster.runtime.agents([0, 1])]
    assert [s.running for s in statuses] == [False, False] and stopped(pids)
    assert first.result().status == "cancelled"
    assert run_events(cluster, first.run_id, "run_cancelled")

    # Ctrl-C twice within two seconds cancels the run.
    cancelled, run_id = interrupted_client(cluster, home, tmp_path, times=2)
    assert cancelled.returncode == 1
    assert f"run {run_id} was cancelled" in cancelled.stdout
    assert RunStore().get(run_id).status == "cancelled"

    # Ctrl-C once detaches: the run goes on, and `down` cancels it before anything else.
    detached, run_id = interrupted_client(cluster, home, tmp_path, times=1)
    assert detached.returncode == 130
    assert f"podmanager attach {run_id}" in detached.stdout and f"podmanager cancel {run_id}" in detached.stdout
    assert RunStore().get(run_id).status == "running"
    pids = program_pids(cluster, run_id)
    cluster.down()  # no test has the cluster after this one
    assert RunStore().get(run_id).status == "cancelled"
    assert stopped(pids)
    assert run_events(cluster, run_id, "run_cancelled")
