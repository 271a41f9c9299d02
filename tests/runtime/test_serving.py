"""runtime/serving.py: a program's `runtime.serve` against the real router (in this process,
on 127.0.0.1), the program in processes of its own as podmanager starts them.

- One process: ready only after its warmup; answers every request; a SIGTERM (a preemption
  notice) drains it: the requests it holds are answered, then it exits EXIT_PREEMPTED.
- Two JAX processes (one replica over two hosts): both run `predict` on every batch in
  lockstep; following checkpoints, both load a newer one in lockstep while requests keep
  coming (none fails); a notice to the second host drains both.
- Following checkpoints without a `reload` is refused at once, naming what to do.
- A request `predict` raises on, among good ones under load, is answered 422 naming the
  error, and only it: the good ones are all served, the replica serves on. An output JSON
  cannot hold (NaN) is that request's 500. A replica whose warmup inputs fail too ends.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from podmanager.core.clock import poll_until
from podmanager.runtime import replica_protocol as protocol
from podmanager.runtime.contract import EXIT_PREEMPTED
from podmanager.serving.router import Router, RouterConfig

REPO = Path(__file__).resolve().parents[2]
TOKEN = "replica-token"
pytestmark = pytest.mark.timeout(120)

DOUBLER = textwrap.dedent("""
    import sys, time
    from podmanager import runtime

    def predict(inputs):
        time.sleep(0.05)  # a forward pass: requests are in flight when the notice comes
        return [x * 2 for x in inputs]

    runtime.install_preemption_handler()
    sys.exit(runtime.serve(predict, warmup=[1], max_batch=4))
""")

# A batch holding a ragged list or None cannot become an array: predict raises on the batch.
POISONABLE = textwrap.dedent("""
    import os, sys, time
    import numpy as np
    from podmanager import runtime

    def predict(inputs):
        if os.path.exists("broken"):
            raise RuntimeError("the device is gone")
        time.sleep(0.01)
        values = np.array(inputs, dtype=np.int64)
        return [float("nan") if v == 7 else int(v) * 2 for v in values]

    runtime.install_preemption_handler()
    sys.exit(runtime.serve(predict, warmup=[1], max_batch=4))
""")

# Every process gathers the batch from all processes: a collective that hangs unless the
# processes run predict in lockstep, and fails unless they all hold the same inputs. The
# checkpoint's `offset` is added to each output; each process restores it (a collective too).
COLLECTIVE = textwrap.dedent("""
    import sys
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import multihost_utils
    from podmanager import runtime

    def load(step):
        checkpoints = runtime.Checkpointer(read_only=True)
        offset = int(checkpoints.restore(step, {"offset": jnp.zeros((), jnp.int32)})["offset"])
        checkpoints.close()

        def predict(inputs):
            gathered = multihost_utils.process_allgather(np.array(inputs, np.int64))
            assert (gathered == gathered[0]).all(), gathered
            if 13 in inputs and jax.process_index() == 1:
                raise ValueError("13 fails on the second host only")
            return [int(x) * 2 + int(gathered.shape[0]) + offset for x in inputs]  # + the process count

        return predict

    runtime.install_preemption_handler()
    runtime.initialize()
    first = runtime.Checkpointer(read_only=True).latest_step()
    sys.exit(runtime.serve(load(first), warmup=[1], max_batch=4, step=first, reload=load))
""")


class RouterThread:
    """The router on an event loop of its own thread, as its Ray actor runs it."""

    def __init__(self) -> None:
        self.router = Router(RouterConfig(token=TOKEN, slices=(0,), queue_timeout_s=20.0))
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        public, replica = self.call(self.router.start("127.0.0.1", 0, "127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{public}"
        self.replica_url = f"ws://127.0.0.1:{replica}{protocol.REPLICA_PATH}"

    def call(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=30)

    def stats(self):
        async def read():
            return self.router.stats()

        return self.call(read())

    def close(self) -> None:
        self.call(self.router.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


@pytest.fixture
def router():
    running = RouterThread()
    yield running
    running.close()


def replica_env(router: RouterThread, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "PODMANAGER_"))}
    return {**env, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu", protocol.ENV_SERVE_URL: router.replica_url,
            protocol.ENV_SERVE_TOKEN: TOKEN, protocol.ENV_REPLICA: "0", "PODMANAGER_RUN_ID": "run-1", **extra}


def predict(endpoint: str, value: int) -> tuple[int, object]:
    response = requests.post(f"{endpoint}/predict", json={"inputs": value}, timeout=30)
    return response.status_code, response.json()


def ready_replicas(router: RouterThread) -> int:
    return sum(r.state == "ready" for r in router.stats().replicas)


def test_one_process_serves_and_a_notice_drains_it_without_losing_a_request(router, tmp_path):
    program = tmp_path / "doubler.py"
    program.write_text(DOUBLER)
    proc = subprocess.Popen([sys.executable, str(program)], cwd=tmp_path, env=replica_env(router),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        poll_until(lambda: ready_replicas(router) == 1, timeout_s=60, interval_s=0.05, what="the replica's hello")
        [view] = router.stats().replicas
        assert (view.replica, view.run_id) == (0, "run-1")
        with ThreadPoolExecutor(max_workers=12) as pool:
            assert list(pool.map(lambda v: predict(router.endpoint, v), range(12))) == \
                [(200, {"outputs": v * 2}) for v in range(12)]

            # Requests in flight when the notice comes (the router holds up to twice max_batch at a
            # replica, so all eight are there once received): every one is answered by this replica.
            held = [pool.submit(predict, router.endpoint, v) for v in range(100, 108)]
            poll_until(lambda: router.stats().requests == 20, timeout_s=10, interval_s=0.005,
                       what="the requests to reach the router")
            assert sum(r.outstanding for r in router.stats().replicas) > 0
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == EXIT_PREEMPTED, proc.stdout.read()
            assert [f.result(timeout=1) for f in held] == [(200, {"outputs": v * 2}) for v in range(100, 108)]
        stats = router.stats()
        assert stats.failed == 0 and stats.replicas == []
    finally:
        proc.kill()
        proc.wait()


def test_following_checkpoints_without_reload_is_refused_before_serving(router, tmp_path):
    program = tmp_path / "doubler.py"
    program.write_text(DOUBLER)
    done = subprocess.run([sys.executable, str(program)], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env=replica_env(router, **{protocol.ENV_FOLLOW_CHECKPOINTS: "1"}))
    assert done.returncode != 0
    assert "--follow-checkpoints" in done.stderr and "reload=" in done.stderr, done.stderr
    assert router.stats().replicas == []


def post(endpoint: str, inputs: object) -> tuple[int, dict]:
    response = requests.post(f"{endpoint}/predict", json={"inputs": inputs}, timeout=30)
    return response.status_code, response.json()


def test_a_request_predict_raises_on_is_answered_alone_and_the_replica_serves_on(router, tmp_path):
    program = tmp_path / "poisonable.py"
    program.write_text(POISONABLE)
    proc = subprocess.Popen([sys.executable, str(program)], cwd=tmp_path, env=replica_env(router),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        poll_until(lambda: ready_replicas(router) == 1, timeout_s=60, interval_s=0.05, what="the replica's hello")
        good = [v for v in range(120) if v != 7]
        poison = [[[1, 2], [3]], None, [[1, 2], [3]], None]
        with ThreadPoolExecutor(max_workers=16) as pool:  # batches of four, poison among good ones
            good_answers = [pool.submit(post, router.endpoint, v) for v in good]
            poison_answers = [pool.submit(post, router.endpoint, p) for p in poison]
            nan_answer = pool.submit(post, router.endpoint, 7)
            assert [f.result() for f in good_answers] == [(200, {"outputs": v * 2}) for v in good]
            for answer in poison_answers:
                status, body = answer.result()
                assert status == 422, body
                assert body["error"].startswith("predict failed on this request: ")
                assert "TypeError" in body["error"] or "ValueError" in body["error"], body
            status, body = nan_answer.result()
            assert status == 500 and "NaN" in body["error"] and "JSON" in body["error"], body
        assert post(router.endpoint, 50) == (200, {"outputs": 100})  # still serving, the same process
        assert proc.poll() is None
        stats = router.stats()
        assert (stats.served, stats.failed, stats.errors) == (len(good) + 1, 0, len(poison) + 1)
        assert [(v.replica, v.state) for v in stats.replicas] == [(0, "ready")]

        # The replica itself broken: its warmup inputs fail too, so it answers 500 and ends.
        (tmp_path / "broken").touch()
        status, body = post(router.endpoint, 1)
        assert status == 500 and "warmup" in body["error"] and "the device is gone" in body["error"], body
        assert proc.wait(timeout=30) not in (0, EXIT_PREEMPTED)
        assert router.stats().failed == 0
    finally:
        proc.kill()
        output = proc.stdout.read()
        proc.wait()
    assert "ReplicaBroken" in output and "the device is gone" in output, output


@pytest.mark.processes  # JAX's distributed runtime: seconds, not milliseconds
def test_a_replica_over_two_jax_processes_runs_each_batch_on_both_follows_checkpoints_and_drains_together(
        router, tmp_path):
    import jax.numpy as jnp

    from podmanager.runtime import Checkpointer

    program = tmp_path / "collective.py"
    program.write_text(COLLECTIVE)
    checkpoints = Checkpointer(tmp_path / "ck")
    checkpoints.save(1, {"offset": jnp.int32(1)}, force=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        coordinator = f"127.0.0.1:{s.getsockname()[1]}"
    procs = [subprocess.Popen([sys.executable, str(program)], cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              env=replica_env(router, JAX_NUM_PROCESSES="2", JAX_PROCESS_ID=str(i),
                                              JAX_COORDINATOR_ADDRESS=coordinator,
                                              PODMANAGER_CHECKPOINT_DIR=str(tmp_path / "ck"),
                                              **{protocol.ENV_FOLLOW_CHECKPOINTS: "1"}))
             for i in range(2)]
    try:
        poll_until(lambda: ready_replicas(router) == 1, timeout_s=90, interval_s=0.05, what="the replica's hello")
        assert [v.step for v in router.stats().replicas] == [1]  # one replica: only process 0 connects
        with ThreadPoolExecutor(max_workers=10) as pool:
            results = list(pool.map(lambda v: predict(router.endpoint, v), range(10)))
            assert results == [(200, {"outputs": v * 2 + 2 + 1}) for v in range(10)]
            # predict raises on one host only: both hosts agree, run each request alone, and only
            # the poisonous one is an error; the replica goes on in lockstep.
            results = list(pool.map(lambda v: predict(router.endpoint, v), [13, 1, 2, 3, 13, 4]))
            assert [status for status, _ in results] == [422, 200, 200, 200, 422, 200], results
            assert "another host" in results[0][1]["error"]
            assert [body["outputs"] for status, body in results if status == 200] == [v * 2 + 3 for v in (1, 2, 3, 4)]

            # A newer checkpoint while requests keep coming: each is answered by step 1 or by step 2.
            checkpoints.save(2, {"offset": jnp.int32(100)}, force=True)
            during, deadline = [], time.monotonic() + 60
            while [v.step for v in router.stats().replicas] != [2]:
                assert time.monotonic() < deadline, "the replica did not load step 2"
                during += pool.map(lambda v: predict(router.endpoint, v), range(4))
            after = list(pool.map(lambda v: predict(router.endpoint, v), range(4)))
        assert all(answer in ((200, {"outputs": v * 2 + 3}), (200, {"outputs": v * 2 + 102}))
                   for answer, v in zip(during, [0, 1, 2, 3] * len(during))), during
        assert after == [(200, {"outputs": v * 2 + 102}) for v in range(4)]
        checkpoints.close()

        started = time.monotonic()
        procs[1].send_signal(signal.SIGTERM)  # the notice reaches the second host only
        codes = [p.wait(timeout=30) for p in procs]
        assert codes == [EXIT_PREEMPTED, EXIT_PREEMPTED], [p.stdout.read() for p in procs]
        assert time.monotonic() - started < 10
        assert router.stats().replicas == [] and router.stats().failed == 0
    finally:
        for p in procs:
            p.kill()
            p.wait()
