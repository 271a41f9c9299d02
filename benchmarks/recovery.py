"""Recovery figures: detection latency, time to recover, each phase, and goodput.

    python benchmarks/recovery.py [--every 60] [--preemptions 3] [--create-latency 0] [--mode none|spare|elastic]

A dry-run cluster of two spot v4-8 slices (2 simulated hosts; `--create-latency` seconds
of simulated create latency, 0 by default) trains workloads/train_mlp.py with a checkpoint
every 50 steps. Every `--every` seconds after the previous resume, one of the run's slices
(alternating) is preempted — the simulated VM vanishes as a real one would — and `--every`
seconds after it resumed from the last one, the run is stopped (cancelled). `--mode spare`
adds a hot spare (`spares: 1`): the run takes it at once instead of waiting for a create,
and the cluster makes a new spare in the background (the next preemption waits until it is
READY). `--mode elastic` runs with `--min-slices 1` and no spare: the run goes on at once on
the slice left while the lost one is made again, and grows back to both at a checkpoint once
its host has joined (the next preemption waits until it has). For each preemption:

- detect: preemption -> the supervisor has classified it (health monitor or lost agent);
- recover: preemption -> the first training step of the resumed attempt;
- phases: stop (survivors stopped, failure classified), delete, create, join (hosts
  booted and agents healthy), relaunch to first step (JAX init, restore, compile, step).

Goodput is the run's own figure: productive step time / wall time; "goodput at one
preemption per 10 min" is 1 - (median recover + median lost steps x step time) / 600 s; in
elastic mode the time on one slice of two also counts half (the capacity it lacked).
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


class Preempter:
    """Preempts a slice `every` seconds after each attempt starts stepping, and stops the run
    `every` seconds after the attempt that follows the last preemption starts stepping."""

    def __init__(self, cluster, every: float, count: int, spares: bool = False):
        self.cluster, self.every, self.count, self.spares = cluster, every, count, spares
        self.times: list[float] = []
        self._armed_for = -1
        self._lock = threading.Lock()
        self.stopped = False  # the run was stopped here, its preemptions done

    def on_output(self, slot, text: str) -> None:
        # Arm a timer when an attempt prints its first step (an elastic run's: once it has grown back).
        if not any(line.startswith("step ") for line in text.splitlines()) or self._shrunk():
            return
        with self._lock:
            attempt = len(self.times)
            if self._armed_for == attempt or attempt > self.count:
                return
            self._armed_for = attempt
        if attempt == self.count:
            threading.Timer(self.every, self._stop).start()
        else:
            threading.Timer(self.every, self._fire, args=(attempt % 2,)).start()

    def _stop(self) -> None:
        active = self.cluster.runs_store.active(self.cluster.name)
        if active:
            self.stopped = True
            self.cluster.run_handle(active[0].run_id).cancel(wait=False)

    def _shrunk(self) -> bool:
        """An elastic run goes on with fewer slices (its lost one is being made again)."""
        active = self.cluster.runs_store.active(self.cluster.name)
        return bool(active) and getattr(active[0].phase, "on_slices", None) is not None

    def _spare_back(self) -> bool:
        """With a spare: a spare has been READY (its hosts joined) since the last preemption."""
        if not self.spares or not self.times:
            return True
        return any(e.kind == "spare_ready" and e.time > self.times[-1] for e in self.cluster.events())

    def _fire(self, turn: int) -> None:
        from podmanager.api import simulation

        # The run's slices now: after a swap a spare works in the lost slice's place.
        active = self.cluster.runs_store.active(self.cluster.name)
        if not active:  # the run has ended meanwhile
            return
        [run] = active
        # An elastic run still shrunk, or the spare the last swap took not made again yet: armed again
        # at the next step printed after that (a preemption every 10 minutes finds the run whole).
        if getattr(run.phase, "on_slices", None) is not None or not self._spare_back():
            with self._lock:
                self._armed_for = -1
            return
        self.times.append(time.time())
        simulation.preempt(self.cluster.runtime, run.slices[turn % len(run.slices)])


def _interrupt(signum, frame) -> None:
    """SIGTERM (a `timeout`, a kill) ends the benchmark as Ctrl-C does: through `finally`,
    which takes its cluster down."""
    raise KeyboardInterrupt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--every", type=float, default=60.0, help="seconds of training between preemptions")
    parser.add_argument("--preemptions", type=int, default=3)
    parser.add_argument("--steps", type=int, default=100_000,
                        help="at most (the run is stopped EVERY s after it resumed from its last preemption)")
    parser.add_argument("--requirements", action="store_true",
                        help="the run also has a requirement (a small wheel from a local folder) installed on every host")
    parser.add_argument("--create-latency", type=float, default=0.0, metavar="S",
                        help="seconds the simulated cloud takes to create a slice (Google Cloud's: minutes)")
    parser.add_argument("--mode", choices=["none", "spare", "elastic"], default="none",
                        help="spare: one hot spare slice the run takes at once when it loses one; elastic: "
                             "--min-slices 1, the run goes on with the slice left")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _interrupt)
    os.environ["PODMANAGER_HOME"] = tempfile.mkdtemp(prefix="pm-bench-recovery-")
    requirements = {}
    if args.requirements:
        import sys

        sys.path.insert(0, str(REPO / "tests"))
        from wheels import build_wheel

        wheels = Path(os.environ["PODMANAGER_HOME"]) / "wheels"
        wheels.mkdir()
        build_wheel(wheels, "tinydep", "1.0", "ANSWER = 'tiny'\n")
        requirements = {"requirements": ["--no-index", f"--find-links {wheels}", "tinydep==1.0"]}
    from podmanager.api import Cluster
    from podmanager.core.workload import Workload

    cluster = Cluster.from_dict({
        "name": "bench", "backend": "simulated",
        "simulation": {"create_latency_s": args.create_latency, "delete_latency_s": 0.0},
        "health": {"interval_s": 1.0},
        "slices": [{"accelerator": "v4-8", "count": 2, "capacity": "spot",
                    "spares": 1 if args.mode == "spare" else 0}],
    })
    preempter = Preempter(cluster, args.every, args.preemptions, spares=args.mode == "spare")
    workload = Workload(entrypoint="workloads/train_mlp.py", working_dir=str(REPO), parallelism="data",
                        args=["--steps", str(args.steps), "--checkpoint-every", "50", "--log-every", "50"],
                        min_slices=1 if args.mode == "elastic" else None, **requirements)
    try:
        cluster.up(timeout_s=300 + 2 * args.create_latency)
        result = cluster.run(workload, printer=preempter.on_output)
    finally:
        cluster.down()
    if result.status != "succeeded" and not preempter.stopped:
        raise SystemExit(f"run {result.status}: {result.message}")

    rows = []
    for when, incident in zip(preempter.times, result.incidents):
        # The attempt after the incident (an elastic run's grow is an attempt without one).
        attempt = next(a for a in result.attempt_log if a.attempt == incident.attempt + 1)
        phases = incident.phases
        rows.append({
            "detect": incident.detected_at - when,
            "recover": attempt.first_step_time - when,
            "stop": phases.get("stop", 0.0),
            "delete": phases.get("delete", 0.0),
            "create": phases.get("create", 0.0),
            "join": phases.get("join", 0.0),
            "swap": phases.get("swap", 0.0),
            "first_step": phases.get("first_step", 0.0),
            "lost_steps": incident.lost_steps,
            "spare": bool(incident.swaps),
            "shrunk": attempt.ended - attempt.started if attempt.degraded else 0.0,
        })
    stepping = [a for a in result.attempt_log if a.first_step_time and a.last_step_time and a.last_step > a.first_step]
    step_s = statistics.median((a.last_step_time - a.first_step_time) / (a.last_step - a.first_step) for a in stepping)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"2 spot v4-8 slices (2 simulated hosts), {args.create_latency:g} s create latency, mode {args.mode}; "
          f"a preemption every {args.every:.0f} s of training; {len(rows)} preemptions "
          f"({sum(r['spare'] for r in rows)} taken by a spare)")
    print()
    columns = ["detect", "recover", "stop", "delete", "create", "join", "swap", "first_step", "shrunk"]
    print("| preemption | detect (s) | recover (s) | stop (s) | delete (s) | create (s) | join (s) | swap (s) "
          "| relaunch to first step (s) | on one slice (s) | lost steps |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for i, row in enumerate(rows):
        print(f"| {i + 1} | " + " | ".join(f"{row[c]:.2f}" for c in columns) + f" | {row['lost_steps']} |")
    if rows:
        print("| median | " + " | ".join(f"{statistics.median(r[c] for r in rows):.2f}" for c in columns) + " | |")
    print()
    print(f"run: {result.attempts} attempts, {result.metrics.last_step} steps, wall {result.wall_s:.0f} s, "
          f"goodput {result.goodput:.0%}" + (f", badput {result.badput}" if getattr(result, "badput", None) else ""))
    if rows:
        lost_s = (statistics.median(r["recover"] for r in rows) + statistics.median(r["lost_steps"] or 0 for r in rows) * step_s
                  + statistics.median(r["shrunk"] for r in rows) / 2)  # one slice of two: half the capacity
        print(f"step {step_s * 1000:.0f} ms; lost per preemption {lost_s:.1f} s; goodput at one preemption per "
              f"10 min {1 - lost_s / 600:.1%}")


if __name__ == "__main__":
    main()
