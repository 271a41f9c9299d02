"""runtime/preemption.py: the preemption flag set by SIGTERM, agreed on by every process of the job,
and the exit code that says so."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from podmanager import runtime

pytestmark = pytest.mark.usefixtures("clean_runtime")  # tests/runtime/conftest.py


@pytest.mark.processes  # starts processes: seconds, not milliseconds
def test_initialize_twice_and_preemption_agreement_across_two_processes(tmp_path):
    # Process 1 alone gets the notice; both must see it at the same boundary.
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Each process writes its findings to a file of its own: gloo logs to stdout from other
    # threads, and its writes can tear our lines apart there.
    code = textwrap.dedent("""
        import os, sys
        import jax
        from podmanager import runtime
        le = runtime.initialize()
        assert runtime.initialize() == le       # idempotent
        with open(os.path.join(sys.argv[1], f"out-{le.process_id}.txt"), "w") as out:
            print("before", runtime.preemption_requested_anywhere(), file=out)
            if le.process_id == 1:
                runtime.request_preemption()
            print("after", runtime.preemption_requested(), runtime.preemption_requested_anywhere(), file=out)
            print("count", jax.process_count(), jax.device_count(), dict(runtime.mesh("model").shape), file=out)
            # Started without podmanager's launch environment: JAX's preemption service stays
            # off, so SIGTERM is still the program's.
            print("service", jax.config.jax_enable_preemption_service, file=out)
        """)
    procs = []
    try:
        for pid in range(2):
            env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_NUM_PROCESSES": "2",
                   "JAX_PROCESS_ID": str(pid), "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
                   "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
            procs.append(subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], env=env, text=True,
                                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL))
        outs = [p.communicate(timeout=90)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0, 0], outs
    outs = [(tmp_path / f"out-{pid}.txt").read_text().splitlines() for pid in range(2)]
    assert outs[0] == ["before False", "after False True",
                                    "count 2 4 {'data': 1, 'model': 4}", "service False"]
    assert outs[1] == ["before False", "after True True",
                                    "count 2 4 {'data': 1, 'model': 4}", "service False"]




# ------------------------------------------------------------ preemption


def test_sigterm_sets_the_preemption_flag():
    previous = signal.getsignal(signal.SIGTERM)
    try:
        runtime.install_preemption_handler()
        assert not runtime.preemption_requested()
        assert not runtime.preemption_requested_anywhere()
        signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)
        # The Python-level handler runs at the next bytecode boundary.
        for _ in range(1000):
            if runtime.preemption_requested():
                break
        assert runtime.preemption_requested()
        assert runtime.preemption_requested_anywhere()
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_sigterm_in_a_real_process_exits_with_preempted_code():
    code = """
        import sys, time
        from podmanager import runtime
        runtime.initialize()
        runtime.install_preemption_handler()
        print("ready", flush=True)
        deadline = time.monotonic() + 30
        while not runtime.preemption_requested() and time.monotonic() < deadline:
            time.sleep(0.01)   # a training step would run here
        print("preempted" if runtime.preemption_requested() else "timeout", flush=True)
        sys.exit(runtime.EXIT_PREEMPTED if runtime.preemption_requested() else 1)
    """
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=env,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        assert out.strip() == "preempted"
        assert proc.returncode == runtime.EXIT_PREEMPTED == 75
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_exit_codes_are_distinct_from_signal_deaths():
    assert runtime.EXIT_OK == 0
    assert runtime.EXIT_PREEMPTED not in (0, 1, 128 + signal.SIGTERM, 128 + signal.SIGABRT,
                                          128 + signal.SIGKILL)
