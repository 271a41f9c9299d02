"""`Cluster.run` and `podmanager run` on a dry-run cluster of real local Ray hosts.

One cluster for the module: slice 0 is a v4-16 (2 hosts x 4 chips), slices 1 and 2 are
v4-8s (1 host each), so single-slice and multislice runs share the same hosts. Also: a replica
of a service over both hosts of the v4-16 answering as a one-process forward pass, and loading
the next checkpoint of a training run resumed on a v4-8 with another layout (which continues
as an uninterrupted run), every line of a host's output whatever its volume,
and unmodified TPU programs (at the end: its last test leaves a notice on slice 2 that the
module's `down` outruns).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
import ray
import requests
from cluster_specs import MULTISLICE
from local_reference import uninterrupted_run
from ray_fixtures import module_cluster
from typer.testing import CliRunner

from podmanager.api import simulation
from podmanager.api.serve import ServeOptions
from podmanager.attempts.logs import RunFolder
from podmanager.cli import app
from podmanager.controller import snapshot
from podmanager.core.clock import poll_until
from podmanager.core.errors import SpecError
from podmanager.core.workload import Workload

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

SPEC = MULTISLICE  # shared with test_user_project.py
NAME = SPEC["name"]


home, cluster, _shared_home = module_cluster(SPEC)

# Uninterrupted runs on one local process with as many devices as the slices' chips (v4-16: 8).
MLP_ON_THE_V4_16 = uninterrupted_run("workloads/train_mlp.py", 30, devices=8)
TRANSFORMER_ON_8_CHIPS = uninterrupted_run("workloads/train_transformer.py", 40, devices=8)


def losses(result) -> list[float]:
    """The per-step losses worker 0 of slice 0 printed (`step N loss X`)."""
    text = (Path(result.log_dir) / "slice-0-host-0.log").read_text()
    return [float(line.split()[3]) for line in text.splitlines() if line.startswith("step ")]


def test_data_parallel_on_one_multi_host_slice(cluster):
    workload = Workload(entrypoint="workloads/train_mlp.py", args=["--steps", "30", "--log-every", "1"],
                        slices=[0], parallelism="data", working_dir=str(REPO))
    # The same program on one local process with the same global batch gives the same losses
    # (run meanwhile).
    expected = MLP_ON_THE_V4_16.start()
    result = cluster.run(workload)
    assert result.status == "succeeded", result.message
    assert [(h.slice, h.worker_id, h.exit_code) for h in result.hosts] == [(0, 0, 0), (0, 1, 0)]
    assert result.metrics.last_step == 30 and result.metrics.last_loss < result.metrics.first_loss
    assert losses(result) == pytest.approx(expected.losses(), rel=1e-4)


PROBE = textwrap.dedent("""
    import json, os, jax
    from podmanager import runtime
    runtime.initialize()
    keys = ["JAX_PROCESS_ID", "TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES", "MEGASCALE_NUM_SLICES", "MEGASCALE_SLICE_ID",
            "MEGASCALE_COORDINATOR_ADDRESS", "PODMANAGER_SLICE"]
    print("PROBE " + json.dumps({"devices": jax.device_count(), "local": jax.local_device_count(),
                                 "processes": jax.process_count(), **{k: os.environ.get(k) for k in keys}}))
""")


def probes(result) -> list[dict]:
    out = []
    for path in sorted(Path(result.log_dir).glob("slice-*.log")):
        out += [json.loads(line[6:]) for line in path.read_text().splitlines() if line.startswith("PROBE ")]
    return out


def test_multislice_environment_and_global_devices(cluster, tmp_path):
    (tmp_path / "probe.py").write_text(PROBE)
    result = cluster.run(Workload(entrypoint="probe.py", slices=[1, 2], working_dir=str(tmp_path)))
    assert result.status == "succeeded", result.message
    seen = sorted(probes(result), key=lambda p: p["JAX_PROCESS_ID"])
    assert [p["devices"] for p in seen] == [8, 8]  # the global device count is the cluster's chips
    assert [p["local"] for p in seen] == [4, 4] and [p["processes"] for p in seen] == [2, 2]
    assert [(p["MEGASCALE_SLICE_ID"], p["MEGASCALE_NUM_SLICES"], p["PODMANAGER_SLICE"]) for p in seen] == [
        ("0", "2", "1"), ("1", "2", "2")]
    assert [p["TPU_WORKER_ID"] for p in seen] == ["0", "0"]


# The answers of each checkpoint step given, one process on one CPU device.
LOCAL_FORWARD = textwrap.dedent("""
    import json, sys
    from workloads import serve_transformer
    args = serve_transformer.parse_args(["--checkpoint-dir", sys.argv[1]])
    load = serve_transformer.predict_loader(args)
    print(json.dumps([load(int(step))(json.loads(sys.argv[2])) for step in sys.argv[3:]]))
""")


def test_model_parallel_transformer_trains_and_a_replica_over_both_hosts_serves_and_follows_its_checkpoints(
        cluster, tmp_path):
    with TRANSFORMER_ON_8_CHIPS.meanwhile() as uninterrupted:
        trained_and_served(cluster, tmp_path, uninterrupted)


def trained_and_served(cluster, tmp_path, uninterrupted) -> None:
    """Train on slice 0, serve its checkpoint while a run resumed on slice 1 goes on; the resumed
    run must end at `uninterrupted()`, the loss of 40 steps without a stop."""
    checkpoints = tmp_path / "ck"
    workload = Workload(entrypoint="workloads/train_transformer.py", slices=[0], parallelism="data=2,model=4",
                        args=["--steps", "20", "--log-every", "1", "--checkpoint-every", "20"],
                        checkpoint_dir=str(checkpoints), working_dir=str(REPO))
    result = cluster.run(workload)
    assert result.status == "succeeded", result.message
    assert result.metrics.last_loss < result.metrics.first_loss

    # One replica on the v4-16: the model over all 8 chips of its 2 hosts ("model" axis of 8),
    # following the checkpoints of a training run that goes on meanwhile on slice 1.
    inputs = [[3, 5, 7], [1, 2, 3, 4, 5], [30, 31, 0, 1], [7], "not tokens"]
    handle = cluster.serve(Workload(entrypoint="workloads/serve_transformer.py", slices=[0], parallelism="model",
                                    checkpoint_dir=str(checkpoints), working_dir=str(REPO)),
                           ServeOptions(follow_checkpoints=True))

    def answers() -> list:
        with ThreadPoolExecutor(max_workers=len(inputs)) as pool:  # at once: one batch, or a few
            got = list(pool.map(lambda x: requests.post(f"{handle.endpoint}/predict", json={"inputs": x},
                                                        timeout=60), inputs))
        assert [a.status_code for a in got] == [200] * len(got), [a.text for a in got]
        return [a.json()["outputs"] for a in got]

    try:
        handle.wait_ready(timeout_s=180)
        assert [r.step for r in handle.replicas()] == [20]
        served = {20: answers()}
        # Resumed on one process of a v4-8, laid out anew (model=4): it continues exactly like an
        # uninterrupted run of one process.
        more = cluster.run(workload.model_copy(update={"slices": [1], "parallelism": "model",
                                                       "args": ["--steps", "40", "--checkpoint-every", "20"]}))
        assert more.status == "succeeded", more.message
        assert more.metrics.first_step == 21
        assert more.metrics.last_loss == pytest.approx(uninterrupted(), rel=1e-4)
        poll_until(lambda: [r.step for r in handle.replicas()] == [40], timeout_s=60, interval_s=0.25,
                   what="the replica to load step 40")
        served[40] = answers()
        assert handle.summary()["failures"] == 0
    finally:
        cluster.cancel_service(handle.service_id)
    # The same checkpoints, one process on one CPU device: the same next tokens.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "PODMANAGER_"))}
    local = subprocess.run([sys.executable, "-c", LOCAL_FORWARD, str(checkpoints), json.dumps(inputs), "20", "40"],
                           cwd=REPO, env={**env, "JAX_PLATFORMS": "cpu"}, capture_output=True, text=True, timeout=120)
    assert local.returncode == 0, local.stderr[-3000:]
    assert [served[20], served[40]] == json.loads(local.stdout.splitlines()[-1])
    assert all(isinstance(t, int) for t in served[20][:4]) and "error" in served[20][4]


def test_wrong_mesh_is_refused_before_anything_starts(cluster):
    runs = sorted((Path(os.environ["PODMANAGER_HOME"]) / "clusters" / NAME / "runs").glob("*"))
    with pytest.raises(SpecError, match="--parallelism: .*8 devices"):
        cluster.run(Workload(entrypoint="x.py", slices=[0], parallelism="data=3,model=2"))
    assert sorted((Path(os.environ["PODMANAGER_HOME"]) / "clusters" / NAME / "runs").glob("*")) == runs


def test_a_failing_host_stops_its_siblings_and_is_named(cluster, tmp_path):
    (tmp_path / "fail.py").write_text(textwrap.dedent("""
        import os, sys, time
        if os.environ["JAX_PROCESS_ID"] == "1":
            print("host 1 gives up", flush=True)
            sys.exit(1)
        print("host 0 waits", flush=True)
        time.sleep(600)
    """))
    result = cluster.run(Workload(entrypoint="fail.py", slices=[0], working_dir=str(tmp_path)),
                         budgets={"max_failures": 0})
    assert result.status == "failed"
    last = result.attempt_log[-1]
    assert last.failed_host == "slice-0/host-1" and "exited with code 1" in result.message
    assert "host 1 gives up" in last.last_lines
    codes = {(h.slice, h.worker_id): h.exit_code for h in result.hosts}
    assert codes[(0, 1)] == 1 and codes[(0, 0)] is not None and codes[(0, 0)] < 0  # stopped by a signal
    assert result.wall_s < 60


def workload_processes(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(marker in part for part in proc.info["cmdline"] or []):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def test_interrupt_stops_every_workload_process(cluster, tmp_path):
    marker = "podmanager-interrupt-marker"
    (tmp_path / f"{marker}.py").write_text("import time\nprint('started', flush=True)\ntime.sleep(600)\n")
    started = []

    def interrupt_on_output(slot, text):
        started.append(slot.label)
        if len(started) == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        cluster.run(Workload(entrypoint=f"{marker}.py", slices=[0], working_dir=str(tmp_path)),
                    printer=interrupt_on_output)
    assert workload_processes(marker) == []


def test_command_mode_takes_the_rank_from_the_environment(cluster, tmp_path):
    (tmp_path / "third_party.py").write_text(textwrap.dedent("""
        import argparse
        parser = argparse.ArgumentParser()
        parser.add_argument("--rank", type=int, required=True)
        print(f"rank={parser.parse_args().rank}")
    """))
    result = cluster.run(Workload(command=[sys.executable, "third_party.py", "--rank", "$JAX_PROCESS_ID"],
                                  slices=[0], working_dir=str(tmp_path)))
    assert result.status == "succeeded", result.message
    outputs = sorted(p.read_text().strip() for p in Path(result.log_dir).glob("slice-*.log"))
    assert outputs == ["rank=0", "rank=1"]


def test_cli_run_json_and_logs(cluster, tmp_path):
    (tmp_path / "hello.py").write_text("import os\nprint('hello from', os.environ['JAX_PROCESS_ID'])\n")
    runner = CliRunner()
    result = runner.invoke(app, ["run", "-c", NAME, "--slices", f"{NAME}-s1", "--json", "--working-dir",
                                 str(tmp_path), "hello.py"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout[result.stdout.index("{"):])
    assert summary["status"] == "succeeded"
    assert summary["hosts"] == [{"slice": 1, "worker_id": 0, "exit_code": 0, "lost": None}]
    assert set(summary["metrics"]) >= {"first_step", "last_step", "first_loss", "last_loss"}
    logs = runner.invoke(app, ["logs", "-c", NAME, "--run", summary["run_id"]])
    assert logs.exit_code == 0 and "[slice-1/host-0] hello from 0" in logs.output
    for host in ("1/0", "slice-1/host-0", f"{NAME}-s1/0"):
        one = runner.invoke(app, ["logs", "-c", NAME, "--run", summary["run_id"], "--host", host])
        assert one.output == "[slice-1/host-0] hello from 0\n", host
    other = runner.invoke(app, ["logs", "-c", NAME, "--run", summary["run_id"], "--host", "slice-0/1"])
    assert other.exit_code == 2 and "--host: no output from slice-0/host-1" in other.output

    failing = runner.invoke(app, ["run", "-c", NAME, "--slices", "1", "--working-dir", str(tmp_path),
                                  "--", sys.executable, "-c", "import sys; sys.exit(3)"])
    assert failing.exit_code == 1 and "exited with code 3" in failing.output


def test_ray_users_find_the_cluster_through_status_and_ray_env(cluster):
    access = cluster.status().ray
    assert access is not None and access.dashboard_url.startswith("http://127.0.0.1:")
    table = CliRunner().invoke(app, ["status", "-c", NAME]).output
    assert f"Ray: {access.address}" in table and access.dashboard_url in table
    exports = CliRunner().invoke(app, ["ray-env", "-c", NAME]).output.splitlines()
    env = dict(line.removeprefix("export ").split("=", 1) for line in exports)
    assert env["RAY_ADDRESS"] == access.address and env["RAY_AUTH_MODE"] == "token"
    user = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")} | env
    probe = "import ray; ray.init(); print(len([n for n in ray.nodes() if n['Alive']]))"
    alive = subprocess.run([sys.executable, "-c", probe], env=user, capture_output=True, text=True, timeout=120)
    assert alive.returncode == 0, alive.stderr[-2000:]
    assert int(alive.stdout.split()[-1]) == 1 + 4  # the head and the 4 hosts of the 3 slices
    status = subprocess.run([str(Path(sys.executable).with_name("ray")), "status"], env=user, capture_output=True,
                            text=True, timeout=120)
    assert status.returncode == 0 and "Active:" in status.stdout, status.stderr[-2000:]


def test_status_shows_the_monitors_view_of_the_hosts_without_loading_ray(cluster):
    """`status` reads the snapshot the cluster's monitor keeps: no Ray in the process."""
    poll_until(lambda: snapshot.read_fresh(NAME), timeout_s=30, interval_s=0.2, what="the monitor's snapshot")
    script = ("import json, sys\n"
              "from podmanager import api\n"
              f"status = api.resolve_cluster('{NAME}').status()\n"
              "print(json.dumps({'ray_loaded': 'ray' in sys.modules,"
              " 'hosts': [(h.slice_index, h.worker_id, h.state) for h in status.hosts]}))")
    shown = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    seen = json.loads(shown.stdout.splitlines()[-1])
    assert seen["ray_loaded"] is False
    assert seen["hosts"] == [[0, 0, "healthy"], [0, 1, "healthy"], [1, 0, "healthy"], [2, 0, "healthy"]]
    live = cluster.hosts()
    assert [(h.slice_index, h.worker_id, h.state) for h in live] == [tuple(h) for h in seen["hosts"]]


# ---------------------------------------------------------------- output
# A host's output is complete, whatever its volume and however the program ends, through the
# CLI: `logs` has every line, the failure summary the traceback, and what a cancelled program
# prints while stopping reaches the logs (on the v4-16: two hosts).

LINE = "{rank} line {i:07d} " + "x" * 80  # ~100 bytes


def expected(rank: int, count: int) -> list[str]:
    return [LINE.format(rank=rank, i=i) for i in range(count)]


def host_lines(output: str) -> dict[str, list[str]]:
    """`podmanager logs` output, by host."""
    by_host: dict[str, list[str]] = defaultdict(list)
    for line in output.splitlines():
        host, _, text = line.partition("] ")
        by_host[host.removeprefix("[")].append(text)
    return by_host


def run_id_of(output: str) -> str:
    return re.search(rf"podmanager logs -c {NAME} --run (\S+)", output).group(1)


def test_ten_megabytes_from_every_host_all_reach_the_logs(cluster, tmp_path):
    (tmp_path / "big.py").write_text(textwrap.dedent(f"""
        import os
        rank = int(os.environ["JAX_PROCESS_ID"])
        for i in range(100_000):
            print({LINE!r}.format(rank=rank, i=i))
    """))
    runner = CliRunner()
    run = runner.invoke(app, ["run", "-c", NAME, "--slices", "0", "--working-dir", str(tmp_path), "big.py"])
    assert run.exit_code == 0, run.output[-3000:]
    # The live stream could not show 10 MB as it came: it says so, and where every line is.
    run_id = run_id_of(run.output)
    assert re.search(rf"podmanager: \d+ line\(s\) skipped here to keep up; every line is in "
                     rf"'podmanager logs -c {NAME} --run {run_id} --host slice-0/host-0'", run.output)
    logs = runner.invoke(app, ["logs", "-c", NAME, "--run", run_id])
    assert logs.exit_code == 0
    by_host = host_lines(logs.output)
    assert set(by_host) == {"slice-0/host-0", "slice-0/host-1"}
    assert by_host["slice-0/host-0"] == expected(0, 100_000)
    assert by_host["slice-0/host-1"] == expected(1, 100_000)


def test_three_megabytes_then_a_raise_keeps_every_line_and_shows_the_traceback(cluster, tmp_path):
    marker = tmp_path / "host-0-wrote-all"
    (tmp_path / "burst.py").write_text(textwrap.dedent(f"""
        import os, pathlib, time
        rank = int(os.environ["JAX_PROCESS_ID"])
        for i in range(30_000):
            print({LINE!r}.format(rank=rank, i=i))
        if rank == 0:
            print("host 0 waits", flush=True)
            pathlib.Path({str(marker)!r}).touch()
            time.sleep(600)
        while not pathlib.Path({str(marker)!r}).exists():  # so host 0 has written all of it when stopped
            time.sleep(0.05)
        raise ValueError("boom after 3 MB")
    """))
    runner = CliRunner()
    run = runner.invoke(app, ["run", "-c", NAME, "--slices", "0", "--working-dir", str(tmp_path), "burst.py"])
    assert run.exit_code == 1, run.output[-3000:]
    summary = run.output[run.output.index("last output of slice-0/host-1:"):]
    assert "  Traceback (most recent call last):" in summary and "  ValueError: boom after 3 MB" in summary
    logs = runner.invoke(app, ["logs", "-c", NAME, "--run", run_id_of(run.output)])
    by_host = host_lines(logs.output)
    assert by_host["slice-0/host-0"] == expected(0, 30_000) + ["host 0 waits"]
    failed = by_host["slice-0/host-1"]
    assert failed[:30_000] == expected(1, 30_000)
    assert failed[30_000] == "Traceback (most recent call last):" and failed[-1] == "ValueError: boom after 3 MB"


def test_what_a_cancelled_program_prints_while_stopping_reaches_the_logs(cluster, tmp_path):
    (tmp_path / "saver.py").write_text(textwrap.dedent("""
        import signal, sys, time
        def save(*_):
            print("saving checkpoint...", flush=True)
            time.sleep(0.5)
            print("saved", flush=True)
            sys.exit(0)
        signal.signal(signal.SIGTERM, save)
        print("ready", flush=True)
        time.sleep(600)
    """))
    runner = CliRunner()
    submitted = runner.invoke(app, ["run", "-c", NAME, "--slices", "0", "--detach", "--working-dir", str(tmp_path),
                                    "saver.py"])
    assert submitted.exit_code == 0, submitted.output
    run_id = re.search(r"submitted run (\S+)", submitted.output).group(1)

    def both_ready() -> bool:
        logs = runner.invoke(app, ["logs", "-c", NAME, "--run", run_id])
        return logs.exit_code == 0 and logs.output.count("] ready\n") == 2

    poll_until(both_ready, timeout_s=120, interval_s=0.5, what="both hosts printing 'ready'")
    cancelled = runner.invoke(app, ["cancel", run_id, "-c", NAME])
    assert cancelled.exit_code == 0 and "is cancelled" in cancelled.output
    by_host = host_lines(runner.invoke(app, ["logs", "-c", NAME, "--run", run_id]).output)
    assert by_host == {host: ["ready", "saving checkpoint...", "saved"]
                       for host in ("slice-0/host-0", "slice-0/host-1")}


# ---------------------------------------------------------------- unmodified TPU programs
# A script whose only setup is `jax.distributed.initialize()` forms the right global mesh on one
# slice and across two, each host answers its own metadata server like a TPU VM, and a preemption
# notice reaches the program through the host's metadata watch.

SCRIPT = textwrap.dedent('''
    import json, os, sys
    import jax
    import jax.numpy as jnp

    jax.distributed.initialize()  # nothing else: JAX finds its peers as on a TPU VM
    ones = jnp.ones(jax.local_device_count())
    summed = jax.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")(ones)
    print("RESULT " + json.dumps({"process": jax.process_index(), "processes": jax.process_count(),
                                  "devices": jax.device_count(), "psum": float(summed[0]),
                                  "slice": os.environ.get("MEGASCALE_SLICE_ID")}), flush=True)
''')


def results(cluster, run_id: str) -> list[dict]:
    found = []
    for log in sorted(RunFolder(cluster.name, run_id).folder.glob("slice-*-host-*.log")):
        found += [json.loads(line[len("RESULT "):]) for line in log.read_text().splitlines()
                  if line.startswith("RESULT ")]
    return sorted(found, key=lambda r: r["process"])


def run_plain(cluster, tmp_path, slices: list[int]):
    (tmp_path / "plain.py").write_text(SCRIPT)
    result = cluster.run(Workload(command=["python", "plain.py"], slices=slices, working_dir=str(tmp_path)))
    assert result.status == "succeeded", result.message
    return results(cluster, result.run_id)


def test_a_plain_initialize_forms_the_global_mesh_of_one_slice(cluster, tmp_path):
    seen = run_plain(cluster, tmp_path, [0])
    assert [(r["process"], r["processes"], r["devices"]) for r in seen] == [(0, 2, 8), (1, 2, 8)]
    assert {r["psum"] for r in seen} == {8.0}  # summed across every device of both hosts


def test_a_plain_initialize_forms_the_global_mesh_across_two_slices(cluster, tmp_path):
    seen = run_plain(cluster, tmp_path, [1, 2])
    assert [(r["process"], r["processes"], r["devices"], r["slice"]) for r in seen] == [
        (0, 2, 8, "0"), (1, 2, 8, "1")]  # slice-major process ids
    assert {r["psum"] for r in seen} == {8.0}


def metadata_of(cluster, slice_index: int, worker: int) -> str:
    """The GCE_METADATA_IP a simulated host's processes see."""
    agents = {(s.slice_index, s.worker_id): a for s, a in cluster.runtime.agents([slice_index])}
    agent = agents[(slice_index, worker)]

    @ray.remote(num_cpus=0)
    def environment_of_the_host() -> str:
        return os.environ.get("GCE_METADATA_IP", "")

    node = ray.get(agent.info.remote())["ray_node_id"]
    strategy = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(node, soft=False)
    return ray.get(environment_of_the_host.options(scheduling_strategy=strategy).remote())


def test_each_host_answers_its_own_metadata_like_a_tpu_vm(cluster):
    address = metadata_of(cluster, 0, 1)
    url = f"http://{address}/computeMetadata/v1/instance/attributes/agent-worker-number"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, timeout=10)
    assert refused.value.code == 403
    request = urllib.request.Request(url, headers={"Metadata-Flavor": "Google"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.read().decode() == "1"
    assert metadata_of(cluster, 0, 0) != address  # one server per VM


@pytest.mark.spends_cluster  # slice 2 is preempted when the notice runs out
def test_a_preemption_notice_reaches_the_host_agents_through_their_metadata(cluster):
    agents = cluster.runtime.agents([2])
    assert ray.get([a.preemption_notice.remote() for _, a in agents]) == [None]
    simulation.preempt(cluster.runtime, 2, notice_s=120)  # the last on its cluster: `down` takes the slice first
    assert ray.get([a.preemption_notice.remote() for _, a in agents]) == ["preempted"]
    [where] = cluster.runtime.slice_locations([2])
