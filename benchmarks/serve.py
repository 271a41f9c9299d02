"""Serving figures: latency and failed requests before, during and after preemptions.

    python benchmarks/serve.py [--clients 4] [--phase-s 20] [--spares 1 --create-latency 60]

A dry-run cluster of two spot v5litepod-1 slices serves a small JAX program (a jitted
doubling and a 10 ms stand-in for a forward pass, max_batch 8) with two replicas. `--clients`
threads send one request after another for the whole run. Phases: steady (`--phase-s`), a
preemption of replica 1 with a 3 s notice (until it is replaced and ready), a preemption of
replica 0 without notice (likewise), steady again (`--phase-s`). Per phase: requests, failed
(anything but 200 with the right outputs, or no answer), p50 and p99 latency, throughput.
`--spares K` adds K hot spares (each preemption waits first for a READY one); `--create-latency
S` sets the simulated cloud's create latency once the cluster is up, so a replacement waited
for costs S.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import textwrap
import threading
import time
from pathlib import Path

PROGRAM = textwrap.dedent("""
    import sys, time
    import jax.numpy as jnp
    from podmanager import runtime

    runtime.install_preemption_handler()
    runtime.initialize()

    def predict(inputs):
        time.sleep(0.01)  # a forward pass
        return [int(x) for x in jnp.asarray(inputs) * 2]

    sys.exit(runtime.serve(predict, warmup=[0], max_batch=8))
""")


class Load:
    """Clients sending one request after another; each answer is (sent, ok, latency_s)."""

    def __init__(self, endpoint: str, clients: int) -> None:
        self.endpoint, self.answers = endpoint, []
        self._stop, self._lock = threading.Event(), threading.Lock()
        self._threads = [threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(clients)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=120)

    def _client(self, index: int) -> None:
        import requests

        value = index * 10_000_000
        with requests.Session() as session:
            while not self._stop.is_set():
                value += 1
                sent = time.monotonic()
                try:
                    response = session.post(f"{self.endpoint}/predict", json={"inputs": value}, timeout=120)
                    ok = response.status_code == 200 and response.json() == {"outputs": value * 2}
                except requests.RequestException:
                    ok = False
                with self._lock:
                    self.answers.append((sent, ok, time.monotonic() - sent))

    def between(self, start: float, end: float) -> list[tuple[float, bool, float]]:
        with self._lock:
            return [a for a in self.answers if start <= a[0] < end]


def phase_row(name: str, answers: list[tuple[float, bool, float]], seconds: float) -> str:
    latencies = sorted(a[2] * 1000 for a in answers if a[1])
    failed = sum(not a[1] for a in answers)
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] if latencies else float("nan")
    p50 = statistics.median(latencies) if latencies else float("nan")
    return (f"| {name} | {seconds:.1f} | {len(answers)} | {failed} | {p50:.0f} | {p99:.0f} | "
            f"{len(answers) / seconds:.0f} |")


def prepared_spare(cluster, replica_runs: set[str]) -> bool:
    """A spare is READY, its hosts joined, and every replica's run set up on it since."""
    events = cluster.events()
    for index in cluster.runs_store.spares(cluster.name):
        ready = [e.id for e in events if e.kind == "spare_ready" and e.slice_index == index]
        prepared = {e.run_id for e in events if e.kind == "spare_prepared" and e.slice_index == index
                    and ready and e.id > ready[-1]}
        if ready and replica_runs <= prepared:
            return True
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--phase-s", type=float, default=20.0)
    parser.add_argument("--spares", type=int, default=0)
    parser.add_argument("--create-latency", type=float, default=0.5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="pm-serve-bench-") as tmp:
        os.environ["PODMANAGER_HOME"] = str(Path(tmp) / "home")
        from podmanager.api import Cluster, simulation
        from podmanager.core.clock import poll_until
        from podmanager.core.workload import Workload

        folder = Path(tmp) / "project"
        folder.mkdir()
        (folder / "doubler.py").write_text(PROGRAM)
        spec = {"name": "servebench", "backend": "simulated",
                "simulation": {"create_latency_s": 0.5, "delete_latency_s": 0.0},
                "health": {"interval_s": 0.5}, "recovery": {"backoff_s": 0.0},
                "slices": [{"accelerator": "v5litepod-1", "count": 2, "spares": args.spares, "capacity": "spot"}]}
        with Cluster.from_dict(spec, down_on_exit=True) as cluster:
            cluster.up()
            cluster.simulator.configure_cluster("servebench", args.create_latency, 0.0)
            started = time.monotonic()
            handle = cluster.serve(Workload(entrypoint="doubler.py", working_dir=str(folder)))
            handle.wait_ready(timeout_s=180)
            ready_s = time.monotonic() - started
            load = Load(handle.endpoint, args.clients)
            load.start()
            phases = []
            try:
                mark = time.monotonic()
                time.sleep(args.phase_s)
                phases.append(("steady", mark, time.monotonic()))
                for replica, notice_s, name in ((1, 3.0, "replica 1 preempted, 3 s notice"),
                                                (0, 0.0, "replica 0 preempted, no notice")):
                    if args.spares:
                        runs = set(handle.record().replica_runs)
                        poll_until(lambda: prepared_spare(cluster, runs), timeout_s=args.create_latency + 300,
                                   interval_s=1.0, what="a READY spare prepared for every replica")
                    attempt = {r.replica: r.attempt for r in handle.replicas()}[replica]
                    mark = time.monotonic()
                    simulation.preempt(cluster.runtime, replica, notice_s=notice_s)
                    poll_until(lambda: all(r.state == "ready" for r in handle.replicas())
                               and {r.replica: r.attempt for r in handle.replicas()}[replica] > attempt,
                               timeout_s=300, interval_s=0.25, what=f"replica {replica} to be ready again")
                    phases.append((name, mark, time.monotonic()))
                mark = time.monotonic()
                time.sleep(args.phase_s)
                phases.append(("steady after", mark, time.monotonic()))
            finally:
                load.stop()
                cluster.cancel_service(handle.service_id)

    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"serve to two ready replicas: {ready_s:.1f}s; {args.clients} clients; {args.spares} spare(s); "
          f"create latency {args.create_latency:g}s")
    print("| phase | s | requests | failed | p50 ms | p99 ms | req/s |")
    print("|---|---|---|---|---|---|---|")
    for name, start, end in phases:
        print(phase_row(name, load.between(start, end), end - start))


if __name__ == "__main__":
    main()
