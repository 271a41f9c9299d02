"""runtime/launch.py: the launch environment a program reads, and joining the JAX job (JAX on CPU)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from podmanager import runtime

pytestmark = pytest.mark.usefixtures("clean_runtime")  # tests/runtime/conftest.py


def _run_python(code: str, *, env_extra: dict[str, str] | None = None, timeout: float = 60):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", **(env_extra or {})}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=timeout)


# ------------------------------------------------------------ environment


def test_launch_env_reads_scheduler_variables():
    env = {"JAX_COORDINATOR_ADDRESS": "h0:1234", "JAX_NUM_PROCESSES": "4", "JAX_PROCESS_ID": "3",
           "MEGASCALE_NUM_SLICES": "2", "MEGASCALE_SLICE_ID": "1", "PODMANAGER_CLUSTER": "c1",
           "PODMANAGER_CHECKPOINT_DIR": "/ck", "PODMANAGER_PROGRESS_FILE": "/p.jsonl"}
    le = runtime.launch_env(env)
    assert le == runtime.LaunchEnv("h0:1234", 4, 3, num_slices=2, slice_id=1, cluster="c1",
                                   checkpoint_dir="/ck", progress_file="/p.jsonl")
    assert le.distributed


def test_launch_env_absent_is_single_process():
    le = runtime.launch_env({})
    assert (le.num_processes, le.process_id, le.distributed) == (1, 0, False)


@pytest.mark.parametrize(("env", "match"), [
    ({"JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "0"}, "JAX_COORDINATOR_ADDRESS"),
    ({"JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "2", "JAX_COORDINATOR_ADDRESS": "h:1"}, "outside"),
    ({"JAX_NUM_PROCESSES": "x"}, "not an integer"),
])
def test_launch_env_rejects_inconsistent_values(env, match):
    with pytest.raises(ValueError, match=match):
        runtime.launch_env(env)


def test_the_slice_count_is_the_launchs_else_the_multislice_environments_else_one():
    assert runtime.slice_count({"PODMANAGER_NUM_SLICES": "1", "MEGASCALE_NUM_SLICES": "2"}) == 1  # shrunk
    assert runtime.slice_count({"MEGASCALE_NUM_SLICES": "3"}) == 3  # started by hand, multislice
    assert runtime.slice_count({}) == 1
    with pytest.raises(ValueError, match="PODMANAGER_NUM_SLICES"):
        runtime.slice_count({"PODMANAGER_NUM_SLICES": "0"})


@pytest.mark.processes  # starts processes: seconds, not milliseconds
def test_initialize_fails_when_the_coordinator_never_answers():
    # Process 1 of 2 with no coordinator listening must die, not hang. JAX
    # aborts the process (SIGABRT) once the initialization timeout expires.
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    r = _run_python("""
        from podmanager import runtime
        runtime.initialize(timeout_s=2)
        print("INITIALIZED")
        """, env_extra={"JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}", "JAX_NUM_PROCESSES": "2",
                        "JAX_PROCESS_ID": "1"}, timeout=60)
    assert r.returncode != 0 and "INITIALIZED" not in r.stdout
    assert "DEADLINE_EXCEEDED" in r.stderr
    assert time.monotonic() - start < 45
