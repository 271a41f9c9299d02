"""Inference on a dry-run cluster of real local Ray hosts, from the user's own folder:
a service (`Cluster.serve`, one replica per slice, a load generator on 127.0.0.1) and a batch
prediction run (`workloads/predict.py`), each preempted.

- Two replicas under a steady load (what a replica was running predict on when it was lost
  without notice waits for its supervisor's word, and is retried since the slice was preempted;
  at most one batch may be answered 502 should no word come): requests `predict` raises on (a ragged list, null) are
  answered 422 while every other request is served, no replica dies and no budget is paid;
  the replicas' token is in an owner-only file, in no record of state.db; a preemption with a notice (the replica drains) and one
  without (its requests are retried on the other) fail no request; the replaced replica
  serves again; a newer checkpoint is rolled in (`follow_checkpoints`) one replica at a time,
  never with fewer than one ready, failing no request. Latency of each phase is printed.
- A killed router is started again by Ray on its ports, with the counters of its record; its
  replica connects again (the time each takes is printed).
- No replica ready (both slices lost at once): a request gets 503 with Retry-After after the
  queue timeout (never sooner, never a hang or a reset), and is served again afterwards.
- Batch prediction started through the CLI, preempted with a notice mid-run: every output
  shard once (none written twice: their inodes are watched) and byte for byte what an
  uninterrupted run writes.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from cluster_specs import ONE_CHIP_PAIR
from ray_fixtures import module_cluster

from podmanager.api import simulation
from podmanager.api.serve import ServeOptions
from podmanager.core.clock import poll_until
from podmanager.core.workload import Workload
from podmanager.state import service_tokens
from workloads import predict

REPO = Path(__file__).resolve().parents[2]
PODMANAGER = str(Path(sys.executable).parent / "podmanager")

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]
SPEC = ONE_CHIP_PAIR  # shared with test_durable_runs.py and test_recovery.py
NAME = SPEC["name"]

# Doubles each input and adds the checkpoint's offset.
PROGRAM = textwrap.dedent("""
    import sys, time
    import jax.numpy as jnp
    from podmanager import runtime

    runtime.install_preemption_handler()
    runtime.initialize()

    def load(step):
        checkpoints = runtime.Checkpointer(read_only=True)
        offset = checkpoints.restore(step, {"offset": jnp.zeros((), jnp.int32)})["offset"]
        checkpoints.close()

        def predict(inputs):
            time.sleep(0.01)  # a forward pass
            return [int(x) for x in jnp.asarray(inputs) * 2 + offset]

        return predict

    first = runtime.Checkpointer(read_only=True).latest_step()
    sys.exit(runtime.serve(load(first), warmup=[0], max_batch=8, step=first, reload=load))
""")

QUEUE_TIMEOUT_S = 2.0  # while one replica is ready no request waits this long
home, cluster, _shared_home = module_cluster(SPEC)


@dataclass(frozen=True)
class Answer:
    sent_at: float
    status: int
    latency_ms: float
    error: str = ""
    offset: int | None = None  # outputs - 2 * inputs: the checkpoint that answered


class Load:
    """`workers` clients sending one request after another to the endpoint until stopped."""

    def __init__(self, endpoint: str, workers: int = 4) -> None:
        self.endpoint, self.answers, self._stop = endpoint, [], threading.Event()
        self.offsets = {0}  # the checkpoints' offsets an answer may have
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(workers)]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=120)

    def _client(self, worker: int) -> None:
        value = worker * 1_000_000
        with requests.Session() as session:
            while not self._stop.is_set():
                value += 1
                sent = time.monotonic()
                try:
                    response = session.post(f"{self.endpoint}/predict", json={"inputs": value}, timeout=120)
                    offset = response.json()["outputs"] - value * 2 if response.status_code == 200 else None
                    answer = Answer(sent, response.status_code, (time.monotonic() - sent) * 1000,
                                    "" if offset in self.offsets | {None} else f"wrong outputs {response.text}",
                                    offset) if response.status_code == 200 else \
                        Answer(sent, response.status_code, (time.monotonic() - sent) * 1000, response.text)
                except requests.RequestException as error:  # a reset or a hang: what must never happen
                    answer = Answer(sent, 0, (time.monotonic() - sent) * 1000, repr(error))
                with self._lock:
                    self.answers.append(answer)

    def since(self, start: float, end: float | None = None) -> list[Answer]:
        with self._lock:
            return [a for a in self.answers if a.sent_at >= start and (end is None or a.sent_at < end)]

    def count(self) -> int:
        with self._lock:
            return len(self.answers)


def latency(answers: list[Answer]) -> str:
    values = sorted(a.latency_ms for a in answers if a.status == 200)
    if not values:
        return "no answers"
    p99 = values[min(len(values) - 1, int(len(values) * 0.99))]
    return f"{len(values)} answers, p50 {statistics.median(values):.0f} ms, p99 {p99:.0f} ms"


def states(handle) -> dict[int, str]:
    return {r.replica: r.state for r in handle.replicas()}


def replaced_and_ready(handle, replica: int, attempt_before: int) -> bool:
    now = {r.replica: r for r in handle.replicas()}
    return now[replica].attempt > attempt_before and all(r.state == "ready" for r in now.values())


def ready_count(endpoint: str) -> int:
    return requests.get(f"{endpoint}/healthz", timeout=10).json()["ready"]


def test_replicas_lose_no_request_to_preemptions_or_a_new_checkpoint_and_none_ready_means_503_after_the_timeout(
        cluster, tmp_path):
    import jax.numpy as jnp

    from podmanager.runtime import Checkpointer

    (tmp_path / "doubler.py").write_text(PROGRAM)
    checkpoints = Checkpointer(tmp_path / "ck")
    checkpoints.save(1, {"offset": jnp.int32(0)}, force=True)
    handle = cluster.serve(Workload(entrypoint="doubler.py", working_dir=str(tmp_path),
                                    checkpoint_dir=str(tmp_path / "ck")),
                           ServeOptions(queue_timeout_s=QUEUE_TIMEOUT_S, follow_checkpoints=True))
    try:
        handle.wait_ready(timeout_s=120)
        assert requests.get(f"{handle.endpoint}/healthz", timeout=10).status_code == 200
        token_file = service_tokens.token_path(NAME, handle.service_id)
        token = token_file.read_text()
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        db_path = cluster.services_store.path
        database = b"".join(p.read_bytes() for p in db_path.parent.glob(db_path.name + "*"))  # its WAL too
        assert token.encode() not in database  # no record holds it (the replicas' runs neither)
        with Load(handle.endpoint) as load:
            poll_until(lambda: load.count() >= 50, timeout_s=60, interval_s=0.05, what="the load to start")
            # Poisonous requests among the load's: each answered 422 alone, the replicas serve on.
            attempts = {r.replica: r.attempt for r in handle.replicas()}
            for poison in ([[1, 2], [3]], None, [[1, 2], [3]], None):
                response = requests.post(f"{handle.endpoint}/predict", json={"inputs": poison}, timeout=60)
                assert response.status_code == 422 and "predict failed" in response.json()["error"], response.text
            poll_until(lambda: load.count() >= 100, timeout_s=60, interval_s=0.05, what="more load")
            assert {r.replica: (r.attempt, r.state) for r in handle.replicas()} == \
                {i: (attempts[i], "ready") for i in (0, 1)}
            phases = {"before": (0.0, time.monotonic())}

            for replica, notice_s in ((1, 3.0), (0, 0.0)):  # with a notice, then a sudden loss
                attempt = {r.replica: r.attempt for r in handle.replicas()}[replica]
                started = time.monotonic()
                simulation.preempt(cluster.runtime, replica, notice_s=notice_s)
                poll_until(lambda: replaced_and_ready(handle, replica, attempt), timeout_s=150, interval_s=0.25,
                           what=f"replica {replica} to be replaced and ready")
                phases[f"replica {replica} {'noticed' if notice_s else 'sudden'}"] = (started, time.monotonic())
            after = time.monotonic()
            poll_until(lambda: len(load.since(after)) >= 50, timeout_s=60, interval_s=0.05, what="load afterwards")
            phases["after"] = (after, time.monotonic())

            # A newer checkpoint: rolled in one replica at a time, the other serving meanwhile.
            load.offsets.add(7)
            started, fewest_ready = time.monotonic(), 2
            checkpoints.save(2, {"offset": jnp.int32(7)}, force=True)
            while [r["step"] for r in requests.get(f"{handle.endpoint}/healthz", timeout=10).json()["replicas"]] \
                    != [2, 2]:
                assert time.monotonic() - started < 60, "the replicas did not load step 2"
                fewest_ready = min(fewest_ready, ready_count(handle.endpoint))
                time.sleep(0.02)
            rolled = time.monotonic()
            phases["new checkpoint"] = (started, rolled)
            poll_until(lambda: len(load.since(rolled)) >= 20, timeout_s=60, interval_s=0.05, what="load on step 2")
        checkpoints.close()
        assert fewest_ready >= 1  # one at a time: never both out
        assert {a.offset for a in load.since(rolled)} == {7}
        # The sudden loss: the batch the replica was running predict on when it went waits for
        # its supervisor's word that the slice was preempted, then goes to the other replica (a
        # request that ended the replica must not end a second one: without that word, 502).
        sudden = phases["replica 0 sudden"]
        in_predict = [a for a in load.answers if a.status == 502 and "in case it is what ended" in a.error
                      and sudden[0] <= a.sent_at + a.latency_ms / 1000 and a.sent_at < sudden[1]]
        assert len(in_predict) <= 8, in_predict  # one batch at most (max_batch)
        bad = [a for a in load.answers if (a.status != 200 or a.error) and a not in in_predict]
        assert bad == [], bad[:5]
        print(f"answered 502 at the sudden loss (inside predict): {len(in_predict)}")
        for phase, (start, end) in phases.items():
            print(f"{phase}: {latency(load.since(start, end))}")
        # The router's counters reach the record about once a second.
        summary = poll_until(lambda: (s := handle.summary())["requests"] >= len(load.answers) and s, timeout_s=10,
                             interval_s=0.2, what="the router's counters to catch up")
        assert summary["failures"] == len(in_predict)
        assert [(i["replica"], i["cause"]) for i in summary["incidents"]] == [(1, "preemption"), (0, "preemption")]
        assert 0 < summary["goodput"] < 1  # each replacement took a while at one replica
        print(f"serving goodput {summary['goodput']:.0%}")
        served = {r["replica"]: r["served"] for r in summary["replicas"]}
        assert all(served[i] for i in (0, 1)), served  # both replaced replicas serve again

        # No replica ready (both slices lost at once): a request waits the queue timeout, then
        # gets 503 with Retry-After, never sooner, never a hang or a reset; then it is served again.
        attempts = {r.replica: r.attempt for r in handle.replicas()}
        for replica in (0, 1):
            simulation.preempt(cluster.runtime, replica)
        poll_until(lambda: requests.get(f"{handle.endpoint}/healthz", timeout=10).status_code == 503,
                   timeout_s=30, interval_s=0.05, what="the router to see no replica")
        sent = time.monotonic()
        response = requests.post(f"{handle.endpoint}/predict", json={"inputs": 5}, timeout=60)
        waited = time.monotonic() - sent
        # (A replacement takes far longer than the timeout: a new VM boots, joins, loads and warms up.)
        assert response.status_code == 503 and response.headers["Retry-After"], response.text
        assert QUEUE_TIMEOUT_S <= waited < QUEUE_TIMEOUT_S + 5, waited
        poll_until(lambda: all(replaced_and_ready(handle, i, attempts[i]) for i in (0, 1)), timeout_s=150,
                   interval_s=0.25, what="both replicas to be replaced and ready")
        again = requests.post(f"{handle.endpoint}/predict", json={"inputs": 5}, timeout=60)
        assert (again.status_code, again.json()) == (200, {"outputs": 10 + 7})  # new replicas load the latest
    finally:
        service = cluster.cancel_service(handle.service_id)
    assert service.status == "cancelled"
    assert not token_file.exists()
    assert all(cluster.runs_store.get(r).status == "cancelled" for r in service.replica_runs)
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{handle.endpoint}/healthz", timeout=5)  # the router is gone


def test_a_killed_router_is_back_on_its_ports_with_its_counters_and_its_replica(cluster, tmp_path):
    import ray

    from podmanager.controller.head_actors import NAMESPACE
    from podmanager.serving.router_actor import actor_name

    (tmp_path / "doubler.py").write_text(textwrap.dedent("""
        import sys
        from podmanager import runtime

        runtime.install_preemption_handler()
        sys.exit(runtime.serve(lambda inputs: [x * 2 for x in inputs], warmup=[0]))
    """))
    handle = cluster.serve(Workload(entrypoint="doubler.py", working_dir=str(tmp_path)), ServeOptions(replicas=1))
    try:
        handle.wait_ready(timeout_s=120)
        for value in range(20):
            assert requests.post(f"{handle.endpoint}/predict", json={"inputs": value}, timeout=30).json() == \
                {"outputs": value * 2}
        poll_until(lambda: handle.summary()["requests"] == 20, timeout_s=10, interval_s=0.1,
                   what="the counters in the record")
        router = ray.get_actor(actor_name(handle.service_id), namespace=NAMESPACE)
        os.kill(ray.get(router.pid.remote(), timeout=30), 9)
        killed = time.monotonic()
        poll_until(lambda: _refused(handle.endpoint), timeout_s=10, interval_s=0.005, what="the router to go")
        listening = poll_until(lambda: not _refused(handle.endpoint) and time.monotonic(), timeout_s=60,
                               interval_s=0.01, what="the router to listen again")
        response = requests.post(f"{handle.endpoint}/predict", json={"inputs": 21}, timeout=60)
        served = time.monotonic()
        assert (response.status_code, response.json()) == (200, {"outputs": 42})
        print(f"router killed: listening again after {listening - killed:.2f} s, "
              f"a replica serving again after {served - killed:.2f} s")
        assert listening - killed < 10
        poll_until(lambda: handle.summary()["requests"] == 21, timeout_s=10, interval_s=0.1,
                   what="the restarted router's counters, carried on from the record")
    finally:
        cluster.cancel_service(handle.service_id)


def _refused(endpoint: str) -> bool:
    try:
        requests.get(f"{endpoint}/healthz", timeout=5)
        return False
    except requests.ConnectionError:
        return True


# ---------------------------------------------------------------- batch prediction

SHARDS, ROWS, SEED = 20, 40, 3


class InodeWatch:
    """Notes each output's inode, every 50 ms from another thread: an output written again (a
    new file renamed over it) shows up with a new inode, whichever attempt wrote it."""

    def __init__(self, folder: Path):
        self.folder, self.seen, self.rewritten = folder, {}, set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> InodeWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._look()

    def _look(self) -> None:
        try:
            entries = list(os.scandir(self.folder))
        except FileNotFoundError:
            return
        for entry in entries:
            if not entry.name.startswith("."):
                if self.seen.setdefault(entry.name, entry.inode()) != entry.inode():
                    self.rewritten.add(entry.name)

    def _watch(self) -> None:
        while not self._stop.wait(0.05):
            self._look()


def shard_bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_batch_prediction_preempted_mid_way_writes_every_shard_once_as_an_uninterrupted_run_does(cluster, tmp_path):
    # The user's folder, outside the repository: the workload and what it imports.
    project = tmp_path / "project"
    shutil.copytree(REPO / "workloads", project / "workloads", ignore=shutil.ignore_patterns("__pycache__"))
    inputs = predict.Folder(tmp_path / "in")
    names = predict.make_inputs(inputs, SHARDS, rows=ROWS, features=32, seed=SEED)
    reference = predict.Folder(tmp_path / "reference")
    model = predict.make_model(SEED, features=32, classes=10, batch_rows=16)
    predict.predict_shards(names, inputs, reference, model, log=lambda _: None)
    out = tmp_path / "out"

    with InodeWatch(out) as watch:
        submitted = subprocess.run(
            [PODMANAGER, "run", "-c", NAME, "--detach", "--json", "workloads/predict.py",
             "--input-dir", str(inputs.path), "--output-dir", str(out), "--seed", str(SEED),
             "--batch-rows", "16", "--delay-per-shard", "1.0"],
            cwd=project, capture_output=True, text=True, timeout=120, env=dict(os.environ))
        assert submitted.returncode == 0, submitted.stdout + submitted.stderr
        run_id = json.loads(submitted.stdout)["run_id"]
        poll_until(lambda: len(predict.Folder(out).names()) >= 2, timeout_s=120, interval_s=0.1,
                   what="two output shards")
        # Ten shards a second apart per process. The notice asks the programs to stop between
        # shards (exit 75); should it not reach them in its 5 s, the slice goes all the same,
        # maybe mid-write: either way the run is preempted well before it is done.
        simulation.preempt(cluster.runtime, 1, notice_s=5.0)
        result = cluster.run_handle(run_id).wait(timeout_s=180)

    assert result.status == "succeeded", result.message
    assert (result.attempts, result.preemptions, result.failures) == (2, 1, 0)
    first, second = result.attempt_log
    assert first.last_step is not None and first.last_step < SHARDS // 2  # stopped mid-run
    assert second.last_step == SHARDS // 2  # each of the two processes has done its half
    assert watch.rewritten == set()  # no output written twice, by either attempt
    assert shard_bytes(out) == shard_bytes(reference.path)  # byte for byte, no temporary file left
