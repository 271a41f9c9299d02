"""Durable-run figures: how long a run goes unsupervised when its supervisor's process dies,
and what the supervisor on the cluster's side costs at the start of a run.

    python benchmarks/supervisor.py [--kills 5]

A dry-run cluster of two v4-8 slices trains workloads/train_mlp.py (long enough for every
kill). Each round SIGKILLs the supervisor's process (Ray restarts the actor) and measures:

- restarted: the kill -> the new supervisor process has read the run's record;
- resumed: the kill -> it has re-attached to the running program (supervision resumed);
while the program's pids must stay the same (it is never restarted).

Also, once: submit -> supervisor started, and submit -> the program's first step.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import tempfile
import time
from pathlib import Path

from podmanager.core.clock import poll_until

REPO = Path(__file__).resolve().parent.parent


def wait_for(predicate, timeout_s: float, what: str, interval_s: float = 0.02):  # type: ignore[no-untyped-def]
    return poll_until(predicate, timeout_s=timeout_s, interval_s=interval_s, what=what)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=5)
    args = parser.parse_args()
    os.environ["PODMANAGER_HOME"] = tempfile.mkdtemp(prefix="pm-bench-supervisor-")
    import ray

    from podmanager.api import Cluster
    from podmanager.core.workload import Workload
    from podmanager.state.run_records import RunStore

    cluster = Cluster.from_dict({
        "name": "bench", "backend": "simulated",
        "simulation": {"create_latency_s": 0.0, "delete_latency_s": 0.0},
        "slices": [{"accelerator": "v4-8", "count": 2}],
    })
    runs = RunStore()
    workload = Workload(entrypoint="workloads/train_mlp.py", working_dir=str(REPO), parallelism="data",
                        args=["--steps", "100000", "--log-every", "1000"])
    restarted: list[float] = []
    resumed: list[float] = []
    try:
        cluster.up(timeout_s=300)
        submitted = time.time()
        handle = cluster.submit(workload)
        run_id = handle.run_id

        def event_time(kind: str, after: int = 0) -> float | None:
            found = [e for e in cluster.events(after_id=after) if e.kind == kind and e.run_id == run_id]
            return found[0].time if found else None

        started = wait_for(lambda: event_time("run_started"), 60, "the supervisor to start") - submitted
        first_step = wait_for(lambda: runs.get(run_id).progress.step, 120, "the first step")
        first_step_s = time.time() - submitted
        agents = cluster.runtime.agents([0, 1])
        pids = [ray.get(a.workload_status.remote(run_id)).pid for _, a in agents]
        for _ in range(args.kills):
            last_event = cluster.events()[-1].id
            pid = runs.get(run_id).supervisor.pid
            killed_at = time.time()
            os.kill(pid, signal.SIGKILL)
            restarted.append(wait_for(lambda: event_time("supervisor_restarted", last_event), 60, "a restart")
                             - killed_at)
            resumed.append(wait_for(lambda: event_time("reattached", last_event), 60, "re-attaching") - killed_at)
            now = [ray.get(a.workload_status.remote(run_id)).pid for _, a in agents]
            if now != pids:
                raise SystemExit(f"the program was restarted: pids {pids} -> {now}")
            time.sleep(1.0)  # let the new supervisor settle into its watch loop before the next kill
        handle.cancel()
    finally:
        cluster.down()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"submit -> supervisor started: {started:.2f} s; submit -> first step (step {first_step}): "
          f"{first_step_s:.2f} s")
    print(f"kill -> supervisor restarted: median {statistics.median(restarted):.2f} s "
          f"(min {min(restarted):.2f}, max {max(restarted):.2f}, {len(restarted)} kills)")
    print(f"kill -> supervision resumed (re-attached): median {statistics.median(resumed):.2f} s "
          f"(min {min(resumed):.2f}, max {max(resumed):.2f}); the program's pids never changed")


if __name__ == "__main__":
    main()
