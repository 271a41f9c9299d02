"""A user's first dry run, as typed: `up` of two v4-8 slices (head and two simulated hosts
joined), `status`, then `down`, each a fresh `podmanager` process in a fresh state folder.

    python benchmarks/dry_run.py [--repeats 5] [--vm-image bare|controller]

Prints the median wall time of each command (`status` is the median of 5 per round). To
compare with another version, run it with that checkout first on PYTHONPATH.
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

SPEC = """\
name: drybench
slices:
  - accelerator: v4-8
    count: 2
"""


def timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed (exit {done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return elapsed


def one_round(podmanager: str, vm_image: str = "") -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory(prefix="pm-drybench-") as home:
        env = {**os.environ, "PODMANAGER_HOME": home}
        spec = Path(home) / "spec.yaml"
        spec.write_text(SPEC + (f"simulation:\n  vm_image: {vm_image}\n" if vm_image else ""))
        try:
            up = timed([podmanager, "up", "-f", str(spec), "--dry-run"], env)
            status = statistics.median(timed([podmanager, "status", "-c", "drybench"], env) for _ in range(5))
        finally:
            down = timed([podmanager, "down", "-c", "drybench"], env)
    return up, status, down


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--vm-image", default="", help="the simulated VMs' image (default: the spec's default)")
    opts = parser.parse_args()
    podmanager = str(Path(sys.executable).with_name("podmanager"))
    rounds = [one_round(podmanager, opts.vm_image) for _ in range(opts.repeats)]
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"median of {opts.repeats} rounds")
    print()
    print("| command | median (s) | all (s) |")
    print("|---|---:|---|")
    for name, index in (("`up -f two-v4-8.yaml --dry-run`", 0), ("`status -c NAME`", 1), ("`down -c NAME`", 2)):
        values = [r[index] for r in rounds]
        print(f"| {name} | {statistics.median(values):.2f} | {', '.join(f'{v:.2f}' for v in values)} |")


if __name__ == "__main__":
    main()
