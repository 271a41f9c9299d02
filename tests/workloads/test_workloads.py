"""The example workloads as real multi-process JAX jobs (no Ray): one
subprocess per simulated host, each with its share of CPU devices and the
environment the scheduler would set. (The transformer over two processes with
data=2,model=4, resumed on one process with another layout, runs on a cluster in
test_run.py.)
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from podmanager import runtime

REPO = Path(__file__).resolve().parents[2]
MLP = REPO / "workloads" / "train_mlp.py"
TRANSFORMER = REPO / "workloads" / "train_transformer.py"
BASE_STEPS = 40

pytestmark = pytest.mark.timeout(180)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _clean_env() -> dict[str, str]:
    prefixes = ("JAX_", "XLA_", "TPU_", "MEGASCALE_", "PODMANAGER_")
    return {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}


@dataclass
class Job:
    name: str
    procs: list[subprocess.Popen]
    logs: list[Path]
    progress: Path

    def wait(self, timeout: float = 120) -> list[int]:
        deadline = time.monotonic() + timeout
        for p in self.procs:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        return [p.returncode for p in self.procs]

    def output(self, i: int = 0) -> str:
        return self.logs[i].read_text()

    def records(self) -> list[dict]:
        if not self.progress.exists():
            return []
        return [json.loads(ln) for ln in self.progress.read_text().splitlines() if ln.strip()]

    def losses(self, process_id: int = 0) -> dict[int, float]:
        return {r["step"]: r["loss"] for r in self.records() if r["process_id"] == process_id}

    def describe(self) -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text()[-3000:]}" for log in self.logs)


@contextlib.contextmanager
def launch(tmp_path: Path, name: str, script: Path, args: list[str], *, processes: int,
           devices_per_process: int):
    """Start ``processes`` hosts of one JAX job; kill whatever is left on exit."""
    port = _free_port()
    progress = tmp_path / f"{name}.progress.jsonl"
    procs: list[subprocess.Popen] = []
    logs: list[Path] = []
    try:
        for pid in range(processes):
            env = _clean_env()
            env.update({
                "JAX_PLATFORMS": "cpu",
                "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices_per_process}",
                "JAX_NUM_PROCESSES": str(processes),
                "JAX_PROCESS_ID": str(pid),
                "TPU_WORKER_ID": str(pid),
                "TPU_WORKER_HOSTNAMES": ",".join(["localhost"] * processes),
                "PODMANAGER_CLUSTER": "test",
                "PODMANAGER_SLICE": "0",
                "PODMANAGER_PROGRESS_FILE": str(progress),
                "PODMANAGER_INIT_TIMEOUT": "60",
            })
            if processes > 1:
                env["JAX_COORDINATOR_ADDRESS"] = f"127.0.0.1:{port}"
            log = tmp_path / f"{name}.{pid}.log"
            logs.append(log)
            with log.open("w") as fh:
                procs.append(subprocess.Popen([sys.executable, str(script), *args], env=env,
                                              stdout=fh, stderr=subprocess.STDOUT, cwd=tmp_path))
        yield Job(name, procs, logs, progress)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for p in procs:
            p.wait()


def run_job(tmp_path, name, script, args, *, processes, devices_per_process,
            timeout=120) -> Job:
    with launch(tmp_path, name, script, args, processes=processes,
                devices_per_process=devices_per_process) as job:
        codes = job.wait(timeout)
        assert codes == [0] * processes, f"{name} exit codes {codes}\n{job.describe()}"
    return job


def assert_losses_close(a: dict[int, float], b: dict[int, float], steps, rtol=1e-4):
    for s in steps:
        assert a[s] == pytest.approx(b[s], rel=rtol, abs=1e-6), f"step {s}: {a[s]} != {b[s]}"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("workloads")


@pytest.fixture(scope="module")
def mlp_one_process(workdir) -> Job:
    """The reference: 1 process x 8 devices, BASE_STEPS steps, no checkpoints."""
    return run_job(workdir, "mlp1", MLP, ["--steps", str(BASE_STEPS)], processes=1,
                   devices_per_process=8)


@pytest.mark.processes  # JAX processes
def test_mlp_one_process_learns_and_reports(mlp_one_process):
    losses = mlp_one_process.losses()
    assert sorted(losses) == list(range(1, BASE_STEPS + 1))
    assert losses[BASE_STEPS] < 0.6 * losses[1]
    # The step count is declared: a notice at the last step ends the run instead of resuming it.
    assert {r["total_steps"] for r in mlp_one_process.records()} == {BASE_STEPS}
    out = mlp_one_process.output()
    assert f"step 10 loss {losses[10]:.6f}" in out
    assert out.strip().splitlines()[-1] == f"done steps={BASE_STEPS} final_loss={losses[BASE_STEPS]:.6f}"


@pytest.mark.processes  # JAX processes
def test_min_step_s_paces_the_steps_and_changes_no_loss(workdir, mlp_one_process):
    """A run kept going for a rehearsal leaves the CPU to the rest: each step lasts at least
    --min-step-s, and the losses are the unpaced run's."""
    steps = 6
    job = run_job(workdir, "paced", MLP, ["--steps", str(steps), "--min-step-s", "0.3"], processes=1,
                  devices_per_process=8)
    times = {r["step"]: r["time"] for r in job.records()}
    # Step k's record is written between step k's start and step k+1's, and each step starts at
    # least 0.3 s after the one before: step 6's record is at least 3 x 0.3 s after step 2's
    # (unpaced, the five steps after the first take a few milliseconds each).
    assert times[steps] - times[2] >= (steps - 3) * 0.3, times
    assert_losses_close(job.losses(), mlp_one_process.losses(), range(1, steps + 1))


@pytest.mark.processes  # JAX processes
def test_mlp_two_processes_match_one_process(workdir, mlp_one_process):
    job = run_job(workdir, "mlp2", MLP, ["--steps", str(BASE_STEPS)], processes=2,
                  devices_per_process=4)
    ref = mlp_one_process.losses()
    for pid in (0, 1):
        got = job.losses(pid)
        assert sorted(got) == list(range(1, BASE_STEPS + 1))
        assert_losses_close(got, ref, range(1, BASE_STEPS + 1))
    assert "processes=2 devices=8 mesh={'data': 8, 'model': 1}" in job.output(0)
    assert "done steps=" not in job.output(1)  # only process 0 prints


@pytest.mark.processes  # JAX processes
def test_transformer_bfloat16_single_process_all_model(workdir):
    steps = 30
    job = run_job(workdir, "tpbf16", TRANSFORMER,
                  ["--steps", str(steps), "--parallelism", "model", "--dtype", "bfloat16"],
                  processes=1, devices_per_process=4)
    assert "mesh={'data': 1, 'model': 4} dtype=bfloat16" in job.output()
    losses = job.losses()
    assert losses[steps] < 0.5 * losses[1]


@pytest.mark.processes  # JAX processes
def test_resume_matches_uninterrupted_run(workdir, tmp_path, mlp_one_process):
    half = BASE_STEPS // 2
    ck = tmp_path / "ck"
    common = ["--checkpoint-every", "10", "--checkpoint-dir", str(ck)]
    first = run_job(tmp_path, "first", MLP, ["--steps", str(half), *common], processes=1,
                    devices_per_process=8)
    assert sorted(int(p.name) for p in ck.iterdir() if p.name.isdigit()) == [10, 20]
    second = run_job(tmp_path, "second", MLP, ["--steps", str(BASE_STEPS), *common],
                     processes=1, devices_per_process=8)
    assert f"resumed from step {half}" in second.output()
    losses = second.losses()
    assert sorted(losses) == list(range(half + 1, BASE_STEPS + 1))
    ref = mlp_one_process.losses()
    assert_losses_close(losses, ref, range(half + 1, BASE_STEPS + 1), rtol=1e-6)
    final = f"final_loss={ref[BASE_STEPS]:.6f}"
    assert final in second.output().strip().splitlines()[-1]
    assert first.output().strip().endswith(f"final_loss={ref[half]:.6f}")
    # Nothing left to do: a rerun restores the final checkpoint and reports its loss.
    again = run_job(tmp_path, "again", MLP, ["--steps", str(BASE_STEPS), *common],
                    processes=1, devices_per_process=8)
    assert again.losses() == {}
    assert again.output().strip().splitlines()[-1] == (
        f"done steps={BASE_STEPS} final_loss={ref[BASE_STEPS]:.6f}")


@pytest.mark.processes  # JAX processes
def test_preemption_of_one_host_checkpoints_all_and_resumes(workdir, tmp_path, mlp_one_process):
    ck = tmp_path / "ck"
    args = ["--steps", "100000", "--checkpoint-every", "100000", "--checkpoint-dir", str(ck)]
    with launch(tmp_path, "pre", MLP, args, processes=2, devices_per_process=4) as job:
        deadline = time.monotonic() + 90
        while max(job.losses(0), default=0) < 3:
            assert all(p.poll() is None for p in job.procs), job.describe()
            assert time.monotonic() < deadline, "no progress\n" + job.describe()
            time.sleep(0.05)  # polling the progress file, not synchronising on time
        job.procs[1].send_signal(signal.SIGTERM)  # the notice reaches one host only
        codes = job.wait(90)
    assert codes == [runtime.EXIT_PREEMPTED] * 2, job.describe()
    steps = sorted(int(p.name) for p in ck.iterdir() if p.name.isdigit())
    assert len(steps) == 1
    stopped = steps[0]
    assert stopped == max(job.losses(0)) == max(job.losses(1))
    assert f"preempted step={stopped} checkpoint={stopped}" in job.output(0)
    assert stopped + 5 <= BASE_STEPS, "ran too far to compare with the reference run"

    resumed = run_job(tmp_path, "resume", MLP,
                      ["--steps", str(stopped + 5), "--checkpoint-dir", str(ck)],
                      processes=2, devices_per_process=4)
    assert f"resumed from step {stopped}" in resumed.output(0)
    ref = mlp_one_process.losses()
    assert sorted(resumed.losses(0)) == list(range(stopped + 1, stopped + 6))
    assert_losses_close(job.losses(0), ref, range(1, stopped + 1))
    assert_losses_close(resumed.losses(0), ref, range(stopped + 1, stopped + 6))


@pytest.mark.processes  # JAX processes
def test_wrong_parallelism_is_rejected_with_counts(tmp_path):
    with launch(tmp_path, "bad", MLP, ["--steps", "2", "--parallelism", "data=3"], processes=1,
                devices_per_process=8) as job:
        codes = job.wait(60)
    assert codes[0] != 0
    assert "data=3 x model=1 = 3 devices, but there are 8 devices" in job.output()


# ------------------------------------------------------------ in-process pieces


def test_batches_depend_only_on_seed_and_step():
    from workloads import train_mlp, train_transformer

    a = train_transformer.parse_args(["--seed", "3"])
    b1, b2 = train_transformer.host_batch(a, 7), train_transformer.host_batch(a, 7)
    assert (b1 == b2).all() and not (b1 == train_transformer.host_batch(a, 8)).all()
    assert b1.shape == (a.global_batch, a.seq_len + 1) and b1.max() < a.vocab
    m = train_mlp.parse_args([])
    t = train_mlp.teacher(m)
    x1, y1 = train_mlp.host_batch(m, t, 5)
    x2, y2 = train_mlp.host_batch(m, t, 5)
    assert (x1 == x2).all() and (y1 == y2).all()
    assert len(set(y1.tolist())) > 3  # the teacher uses several classes


def test_bfloat16_compute_keeps_float32_params_and_gradients():
    import jax
    import jax.numpy as jnp

    from workloads import common, train_transformer

    args = train_transformer.parse_args(["--global-batch", "4", "--layers", "1", "--d-model", "16",
                                         "--heads", "2", "--d-ff", "32", "--seq-len", "8"])
    mesh = runtime.mesh("data")
    params = jax.jit(lambda k: train_transformer.init_params(k, args))(jax.random.key(0))
    tokens = jnp.asarray(train_transformer.host_batch(args, 1))
    logits = jax.jit(lambda p, t: train_transformer.forward(p, t, jnp.bfloat16, mesh))(
        params, tokens[:, :-1])
    assert logits.dtype == jnp.float32  # loss computed in float32
    loss, grads = jax.jit(jax.value_and_grad(
        lambda p, t: train_transformer.loss_fn(p, t, jnp.bfloat16, mesh)))(params, tokens)
    assert jnp.isfinite(loss)
    assert {g.dtype for g in jax.tree.leaves(grads)} == {jnp.dtype(jnp.float32)}
    new, opt = jax.jit(lambda p, g: common.adam_update(p, g, common.adam_init(p), 1e-3))(
        params, grads)
    assert {p.dtype for p in jax.tree.leaves(new)} == {jnp.dtype(jnp.float32)}
    assert int(opt["count"]) == 1
