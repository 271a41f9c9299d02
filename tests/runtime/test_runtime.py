"""Unit tests of podmanager.runtime (single process; JAX on CPU)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from podmanager import runtime


@pytest.fixture(autouse=True)
def _clean_runtime_state(monkeypatch):
    for name in ("PODMANAGER_PROGRESS_FILE", "PODMANAGER_CHECKPOINT_DIR", "JAX_NUM_PROCESSES",
                 "JAX_PROCESS_ID", "JAX_COORDINATOR_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    runtime._reset_for_tests()
    yield
    runtime._reset_for_tests()


def _run_python(code: str, *, env_extra: dict[str, str] | None = None, timeout: float = 60):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", **(env_extra or {})}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=timeout)


# ------------------------------------------------------------ parse_parallelism


@pytest.mark.parametrize(("text", "n", "want"), [
    ("data", 8, {"data": 8, "model": 1}),
    ("model", 8, {"data": 1, "model": 8}),
    ("data=2,model=4", 8, {"data": 2, "model": 4}),
    (" model=4 , data=2 ", 8, {"data": 2, "model": 4}),
    ("data=2,model", 8, {"data": 2, "model": 4}),
    ("data=*,model=2", 8, {"data": 4, "model": 2}),
    ("model=-1,data=4", 8, {"data": 4, "model": 2}),
    ("data=1", 1, {"data": 1, "model": 1}),
    ({"data": 2, "model": 4}, 8, {"data": 2, "model": 4}),
    ({"model": 8}, 8, {"data": 1, "model": 8}),
])
def test_parse_parallelism_accepts(text, n, want):
    assert runtime.parse_parallelism(text, n) == want


@pytest.mark.parametrize(("text", "n", "match"), [
    ("data=2,model=2", 8, r"data=2 x model=2 = 4 devices, but there are 8 devices"),
    ("data=3", 8, r"= 3 devices, but there are 8"),
    ("data=3,model", 8, r"8 devices are not divisible by 3"),
    ("data,model", 8, r"only one axis"),
    ("pipeline=2", 8, r"unknown axis 'pipeline'"),
    ("data=2,data=4", 8, r"given twice"),
    ("data=0,model=8", 8, r"must be positive"),
    ("data=two", 8, r"integer size"),
    ("", 8, r"empty"),
    ({"data": 2.5}, 8, r"must be an int"),
])
def test_parse_parallelism_rejects(text, n, match):
    with pytest.raises(ValueError, match=match):
        runtime.parse_parallelism(text, n)


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


# ------------------------------------------------------------ mesh


def test_mesh_shape_axes_and_tensor_parallel_matmul():
    r = _run_python("""
        import jax
        jax.config.update("jax_num_cpu_devices", 8)
        from podmanager import runtime
        import jax.numpy as jnp
        from jax.sharding import NamedSharding, PartitionSpec as P
        runtime.initialize()
        for spec in ["data", "model", "data=2,model=4", {"data": 4, "model": 2}]:
            m = runtime.mesh(spec)
            print("MESH", dict(m.shape), [str(t) for t in m.axis_types], m.devices.size)
        m = runtime.mesh("data=2,model=4")
        x = jax.device_put(jnp.ones((4, 16)), NamedSharding(m, P("data", None)))
        w = jax.device_put(jnp.ones((16, 8)), NamedSharding(m, P(None, "model")))
        print("MATMUL", float(jax.jit(lambda x, w: (x @ w).sum())(x, w)))
        try:
            runtime.mesh("data=3")
        except ValueError as e:
            print("ERROR", e)
        """)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [ln for ln in r.stdout.splitlines()]
    meshes = [ln for ln in lines if ln.startswith("MESH")]
    assert meshes == [
        "MESH {'data': 8, 'model': 1} ['AxisType.Auto', 'AxisType.Auto'] 8",
        "MESH {'data': 1, 'model': 8} ['AxisType.Auto', 'AxisType.Auto'] 8",
        "MESH {'data': 2, 'model': 4} ['AxisType.Auto', 'AxisType.Auto'] 8",
        "MESH {'data': 4, 'model': 2} ['AxisType.Auto', 'AxisType.Auto'] 8",
    ]
    assert "MATMUL 512.0" in lines
    assert any(ln.startswith("ERROR") and "there are 8 devices" in ln for ln in lines)


class _FakeDevice:
    def __init__(self, i: int, slice_index: int):
        self.id, self.slice_index, self.process_index = i, slice_index, i // 2
        self.platform = self.device_kind = "cpu"


def test_device_grid_one_slice_keeps_model_axis_within_hosts():
    devs = [_FakeDevice(i, 0) for i in range(8)]
    grid = runtime.device_grid({"data": 4, "model": 2}, devs)
    assert [[d.id for d in row] for row in grid] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    # each "model" group is one host (process)
    assert all(len({d.process_index for d in row}) == 1 for row in grid)


def test_device_grid_multislice_puts_data_across_slices():
    devs = [_FakeDevice(i, i // 4) for i in range(8)]
    grid = runtime.device_grid({"data": 2, "model": 4}, devs)
    assert [{d.slice_index for d in row} for row in grid] == [{0}, {1}]
    with pytest.raises(ValueError, match="2 slices need a 'data' axis that is a multiple of 2"):
        runtime.device_grid({"data": 1, "model": 8}, devs)


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


# ------------------------------------------------------------ progress


def test_report_progress_appends_json_lines(tmp_path, monkeypatch):
    path = tmp_path / "sub" / "progress.jsonl"
    monkeypatch.setenv("PODMANAGER_PROGRESS_FILE", str(path))
    before = time.time()
    runtime.report_progress(1, loss=2.5)
    runtime.report_progress(2, loss=1, accuracy=0.25)
    import numpy as np

    runtime.report_progress(3, loss=np.float32(0.5))
    lines = path.read_text().splitlines()
    recs = [json.loads(ln) for ln in lines]
    assert [r["step"] for r in recs] == [1, 2, 3]
    assert [r["loss"] for r in recs] == [2.5, 1.0, 0.5]
    assert recs[1]["accuracy"] == 0.25 and isinstance(recs[1]["loss"], float)
    assert all(r["process_id"] == 0 for r in recs)
    assert all(before <= r["time"] <= time.time() for r in recs)
    assert set(recs[0]) == {"step", "time", "process_id", "loss"}


def test_report_progress_uses_process_id_from_env(tmp_path, monkeypatch):
    path = tmp_path / "p.jsonl"
    monkeypatch.setenv("PODMANAGER_PROGRESS_FILE", str(path))
    monkeypatch.setenv("JAX_NUM_PROCESSES", "4")
    monkeypatch.setenv("JAX_PROCESS_ID", "3")
    monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "h:1")
    runtime.report_progress(7, loss=0.1)
    assert json.loads(path.read_text())["process_id"] == 3


def test_report_progress_is_noop_without_env(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runtime.report_progress(1, loss=1.0)
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------ checkpoints


def _tree(v: float):
    import jax.numpy as jnp

    return {"w": jnp.full((3, 2), v, jnp.float32), "n": {"count": jnp.asarray(int(v), jnp.int32)}}


def _value(tree) -> float:
    return float(tree["w"][0, 0])


def test_checkpointer_saves_every_n_and_restores_latest(tmp_path):
    with runtime.Checkpointer(tmp_path / "ck", every_n_steps=5) as ck:
        assert ck.latest_step() is None
        assert ck.restore_latest(_tree(0)) is None
        saved = {s: ck.save(s, _tree(s)) for s in range(1, 12)}
        assert [s for s, ok in saved.items() if ok] == [5, 10]
        assert ck.save(11, _tree(11), force=True)
        assert not ck.save(11, _tree(99), force=True)  # already there: not rewritten
        assert ck.latest_step() == 11
        assert ck.all_steps() == [5, 10, 11]
    # A fresh Checkpointer (a restarted process) sees the same thing.
    with runtime.Checkpointer(tmp_path / "ck", every_n_steps=5) as ck:
        step, tree = ck.restore_latest(_tree(0))
    assert step == 11 and _value(tree) == 11.0 and int(tree["n"]["count"]) == 11
    assert tree["w"].shape == (3, 2) and str(tree["w"].dtype) == "float32"


def test_a_saved_checkpoint_rides_on_the_progress_lines_without_counting_a_step(tmp_path, monkeypatch):
    from podmanager.runtime.contract import ProgressRecord

    path = tmp_path / "progress.jsonl"
    monkeypatch.setenv("PODMANAGER_PROGRESS_FILE", str(path))
    with runtime.Checkpointer(tmp_path / "ck", every_n_steps=5) as ck:
        for step in range(1, 7):
            runtime.report_progress(step, loss=1.0 / step)
            saving = time.time()
            if ck.save(step, _tree(step)):
                before, after = saving, time.time()
    records = [ProgressRecord.from_line(line) for line in path.read_text().splitlines()]
    # step 5's line again, the same step and time, now saying checkpoint 5 is final; then step 6 carries it
    assert [(r.step, r.checkpoint_step) for r in records] == [(1, None), (2, None), (3, None), (4, None),
                                                              (5, None), (5, 5), (6, 5)]
    assert records[5].time == records[4].time and records[5].loss == records[4].loss
    assert before <= records[5].checkpoint_time <= after and records[6].checkpoint_time == records[5].checkpoint_time


def test_checkpointer_keeps_max_to_keep(tmp_path):
    with runtime.Checkpointer(tmp_path, every_n_steps=1, max_to_keep=2) as ck:
        for s in range(1, 5):
            ck.save(s, _tree(s))
        assert ck.all_steps() == [3, 4]


def test_checkpointer_defaults_to_env_dir_and_is_disabled_without_one(tmp_path, monkeypatch):
    off = runtime.Checkpointer(every_n_steps=1)
    assert not off.enabled and not off.save(1, _tree(1), force=True) and off.latest_step() is None
    monkeypatch.setenv("PODMANAGER_CHECKPOINT_DIR", str(tmp_path / "envck"))
    with runtime.Checkpointer(every_n_steps=0) as ck:
        assert ck.enabled and ck.directory == str(tmp_path / "envck")
        assert not ck.save(3, _tree(3))  # periodic saving off
        assert ck.save(3, _tree(3), force=True)
    assert (tmp_path / "envck" / "3").is_dir()


def test_incomplete_checkpoint_is_invisible(tmp_path):
    from orbax.checkpoint._src.path import atomicity

    with runtime.Checkpointer(tmp_path, every_n_steps=5) as ck:
        ck.save(5, _tree(5))
        # Crash after the data is written but before orbax's atomic rename.
        orig = atomicity.AtomicRenameTemporaryPath.finalize

        def crash(self, *a, **k):
            raise RuntimeError("simulated crash before finalize")

        atomicity.AtomicRenameTemporaryPath.finalize = crash
        try:
            with pytest.raises(RuntimeError, match="simulated crash"):
                ck.save(10, _tree(10))
        finally:
            atomicity.AtomicRenameTemporaryPath.finalize = orig
        leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith("10")]
        assert leftovers and all(name != "10" for name in leftovers)  # only a temp dir
        assert ck.latest_step() == 5
    with runtime.Checkpointer(tmp_path, every_n_steps=5) as ck:
        assert ck.all_steps() == [5]
        step, tree = ck.restore_latest(_tree(0))
        assert (step, _value(tree)) == (5, 5.0)
        assert ck.save(10, _tree(10))  # the step can be written again
        assert ck.restore_latest(_tree(0))[0] == 10


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
