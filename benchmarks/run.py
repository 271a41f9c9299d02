"""Overhead of `podmanager run` against launching the same processes by hand.

    python benchmarks/run.py [--steps 800] [--repeats 5]

A dry-run cluster with one v4-16 slice (2 simulated hosts x 4 CPU "chips") trains
workloads/train_mlp.py data-parallel. Each round runs it twice, in alternating order:
once through `Cluster.run` (working dir shipped, agents launch the processes, output
streamed and logged, progress polled), and once by hand: the same two processes with
the same environment (`scheduler.launch_envs`) started directly with subprocess. The
ratio of the medians (and the median of the per-round ratios) is printed.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def by_hand(steps: int, chips: int, hosts: int) -> float:
    from podmanager.hosts.head import free_port
    from podmanager.scheduler import HostSlot, launch_envs

    slots = [HostSlot(0, w, "bench-s0", "127.0.0.1", chips, "v4-16") for w in range(hosts)]
    envs = launch_envs(slots, coordinator_port=free_port(), cluster="bench", run_id="by-hand", attempt=0,
                       checkpoint_dir=None, parallelism="data", simulated=True)
    argv = [sys.executable, "-u", "workloads/train_mlp.py", "--steps", str(steps)]
    start = time.perf_counter()
    procs = [subprocess.Popen(argv, cwd=REPO, env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for env in envs]
    try:
        codes = [p.wait(timeout=600) for p in procs]
    finally:
        for p in procs:
            p.kill()
    if any(codes):
        raise SystemExit(f"by-hand run failed: exit codes {codes}")
    return time.perf_counter() - start


def through_podmanager(cluster, steps: int) -> float:
    from podmanager.workload import Workload

    workload = Workload(entrypoint="workloads/train_mlp.py", args=["--steps", str(steps)], working_dir=str(REPO),
                        parallelism="data")
    start = time.perf_counter()
    result = cluster.run(workload)
    elapsed = time.perf_counter() - start
    if result.status != "succeeded":
        raise SystemExit(f"podmanager run failed: {result.message}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=800, help="training steps (about 30 s on 2 cores)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    os.environ["PODMANAGER_HOME"] = tempfile.mkdtemp(prefix="pm-bench-run-")
    from podmanager.api import Cluster

    cluster = Cluster.from_dict({"name": "bench", "backend": "simulated",
                                 "simulation": {"create_latency_s": 0.0, "delete_latency_s": 0.0},
                                 "slices": [{"accelerator": "v4-16"}]})
    pm, hand = [], []
    try:
        cluster.up(timeout_s=300)
        for round_index in range(args.repeats):
            order = (0, 1) if round_index % 2 == 0 else (1, 0)
            for which in order:
                if which == 0:
                    pm.append(through_podmanager(cluster, args.steps))
                else:
                    hand.append(by_hand(args.steps, chips=4, hosts=2))
            print(f"round {round_index}: podmanager {pm[-1]:.2f}s, by hand {hand[-1]:.2f}s", file=sys.stderr)
    finally:
        cluster.down()
    ratios = [a / b for a, b in zip(pm, hand)]
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"train_mlp.py --steps {args.steps} on 2 simulated hosts; {args.repeats} rounds, alternating order")
    print()
    print("| launch | median wall time (s) | all runs (s) |")
    print("|---|---:|---|")
    print(f"| `podmanager run` | {statistics.median(pm):.2f} | {', '.join(f'{t:.2f}' for t in pm)} |")
    print(f"| by hand, same env | {statistics.median(hand):.2f} | {', '.join(f'{t:.2f}' for t in hand)} |")
    print()
    print(f"ratio of medians: {statistics.median(pm) / statistics.median(hand):.3f}; "
          f"median of per-round ratios: {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
