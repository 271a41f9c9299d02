"""A program that joined a JAX job (`jax.distributed.initialize()`) still ends at once when its
run is cancelled, and still checkpoints and exits 75 on a preemption notice when it asked for
podmanager's handler. JAX's preemption service would otherwise take SIGTERM over and swallow
it, and every cancel would wait for the whole grace period and a SIGKILL.

Real one-process JAX jobs on CPU, launched as a host agent launches them (`HostRuns` with the
attempt's `launch_envs`)."""

from __future__ import annotations

import signal
import sys
import textwrap
import time

import pytest

from podmanager.attempts.launch import launch_envs
from podmanager.core.clock import poll_until
from podmanager.core.local_ports import free_port
from podmanager.core.records import HostSlot
from podmanager.core.workload import Workload
from podmanager.runtime.contract import EXIT_PREEMPTED
from podmanager.vm.host_wire import HostLaunch, RunSetup
from podmanager.vm.workload_runs import HostRuns

pytestmark = [pytest.mark.processes]  # starts JAX processes: seconds, not milliseconds

GRACE_S = 10.0

# Joins a one-process JAX job with JAX's own call, says so, then steps until a notice.
PROGRAM = textwrap.dedent("""
    import os, sys, time
    import jax
    from podmanager import runtime
    if sys.argv[1] == "handler":
        runtime.install_preemption_handler()
    jax.distributed.initialize(coordinator_address=os.environ["JAX_COORDINATOR_ADDRESS"],
                               num_processes=1, process_id=0)
    runtime.initialize()
    print("joined", flush=True)
    while True:
        time.sleep(0.05)
        if runtime.preemption_requested_anywhere():
            print("checkpoint", flush=True)
            sys.exit(runtime.EXIT_PREEMPTED)
""")


def _start(runs: HostRuns, mode: str) -> None:
    slot = HostSlot(0, 0, "node", "127.0.0.1", 1, "v4-8")
    env, = launch_envs([slot], coordinator_port=free_port(), cluster="c", run_id="r", attempt=0,
                       checkpoint_dir=None, parallelism=None, simulated=False)
    workload = Workload(command=[sys.executable, "-c", PROGRAM, mode], working_dir=None)
    runs.start(HostLaunch(run=RunSetup(run_id="r", workload=workload), attempt=0, env={**env, "JAX_PLATFORMS": "cpu"}))
    poll_until(lambda: b"joined" in runs.poll("r", 0).output or not runs.poll("r", 0).running, timeout_s=120,
               interval_s=0.1, what="the program to join its JAX job")
    assert runs.poll("r", 0).running, runs.poll("r", 0).output.decode()[-2000:]


def test_cancelling_a_jax_program_ends_it_at_once_not_after_the_grace_period(tmp_path):
    runs = HostRuns(tmp_path)
    _start(runs, "plain")
    started = time.monotonic()
    code = runs.stop("r", grace_s=GRACE_S)
    assert code == -signal.SIGTERM, runs.poll("r", 0).output.decode()[-2000:]  # not SIGKILL after the grace
    assert time.monotonic() - started < GRACE_S / 2  # ended by the SIGTERM, not at the grace period's end


def test_a_notice_to_a_jax_program_with_podmanagers_handler_still_checkpoints_and_exits_75(tmp_path):
    runs = HostRuns(tmp_path)
    _start(runs, "handler")
    try:
        runs.signal("r", signal.SIGTERM)
        code = runs.processes["r"].wait(30)
        output = runs.poll("r", 0).output.decode()
        assert code == EXIT_PREEMPTED, output[-2000:]
        assert "checkpoint" in output
    finally:
        runs.stop_all(grace_s=1)
