"""Overhead of `podmanager run` against launching the same processes by hand.

    python benchmarks/run.py [--steps 800] [--repeats 5]

A dry-run cluster with one v4-16 slice (2 simulated hosts x 4 CPU "chips") trains
workloads/train_mlp.py data-parallel. Each round runs it twice, in alternating order:
once through `Cluster.run` (working dir shipped, agents launch the processes, output
streamed and logged, progress polled), and once by hand: the same two processes with
the same environment (`scheduler.launch_envs`) started directly with subprocess. The
ratio of the medians (and the median of the per-round ratios) is printed, and where the
time goes: start to the first step, time per step, and last step to the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Timing:
    wall_s: float
    to_first_step_s: float  # launch to the first step (start-up, distributed init, compile)
    step_ms: float  # mean time per step after the first
    after_last_step_s: float  # last step to the launcher noticing every process has exited


def timing(start: float, end: float, steps: int, first_time: float, last_time: float) -> Timing:
    return Timing(end - start, first_time - start, (last_time - first_time) / (steps - 1) * 1000, end - last_time)


def by_hand(steps: int, chips: int, hosts: int) -> Timing:
    from podmanager.attempts.launch import HostSlot, launch_envs
    from podmanager.vm.ray_node import free_port

    slots = [HostSlot(0, w, "bench-s0", "127.0.0.1", chips, "v4-16") for w in range(hosts)]
    envs = launch_envs(slots, coordinator_port=free_port(), cluster="bench", run_id="by-hand", attempt=0,
                       checkpoint_dir=None, parallelism="data", simulated=True)
    argv = [sys.executable, "-u", "workloads/train_mlp.py", "--steps", str(steps)]
    # Progress goes to a file, as under podmanager (where the agent sets it), for the phases.
    progress = Path(tempfile.mkdtemp(prefix="pm-bench-progress-")) / "progress.jsonl"
    start = time.time()
    procs = [subprocess.Popen(argv, cwd=REPO, env={**os.environ, **env, "PODMANAGER_PROGRESS_FILE": str(progress)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for env in envs]
    try:
        codes = [p.wait(timeout=600) for p in procs]
    finally:
        for p in procs:
            p.kill()
    end = time.time()
    if any(codes):
        raise SystemExit(f"by-hand run failed: exit codes {codes}")
    records = [json.loads(line) for line in progress.read_text().splitlines()]
    shutil.rmtree(progress.parent)
    times = {r["step"]: r["time"] for r in records if r["process_id"] == 0}
    return timing(start, end, steps, times[1], times[steps])


def through_podmanager(cluster, steps: int) -> Timing:
    from podmanager.core.workload import Workload

    workload = Workload(entrypoint="workloads/train_mlp.py", args=["--steps", str(steps)], working_dir=str(REPO),
                        parallelism="data")
    start = time.time()
    result = cluster.run(workload)
    end = time.time()
    if result.status != "succeeded":
        raise SystemExit(f"podmanager run failed: {result.message}")
    attempt = result.attempt_log[-1]
    return timing(start, end, steps, attempt.first_step_time, attempt.last_step_time)


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
            print(f"round {round_index}: podmanager {pm[-1].wall_s:.2f}s, by hand {hand[-1].wall_s:.2f}s",
                  file=sys.stderr)
    finally:
        cluster.down()
    report(pm, hand, args)


def report(pm: list[Timing], hand: list[Timing], args: argparse.Namespace) -> None:
    def median(runs: list[Timing], field: str) -> float:
        return statistics.median(getattr(t, field) for t in runs)

    ratios = [a.wall_s / b.wall_s for a, b in zip(pm, hand)]
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"train_mlp.py --steps {args.steps} on 2 simulated hosts; {args.repeats} rounds, alternating order")
    print()
    print("| launch | median wall time (s) | to first step (s) | per step (ms) | after last step (s) | all runs (s) |")
    print("|---|---:|---:|---:|---:|---|")
    for name, runs in (("`podmanager run`", pm), ("by hand, same env", hand)):
        print(f"| {name} | {median(runs, 'wall_s'):.2f} | {median(runs, 'to_first_step_s'):.2f} | "
              f"{median(runs, 'step_ms'):.1f} | {median(runs, 'after_last_step_s'):.2f} | "
              f"{', '.join(f'{t.wall_s:.2f}' for t in runs)} |")
    print()
    print(f"ratio of medians: {median(pm, 'wall_s') / median(hand, 'wall_s'):.3f}; "
          f"median of per-round ratios: {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
