"""How long the CLI takes for the commands people type most: `--help`, and `status`/`runs`
of a running dry-run cluster (one v4-16 slice: a Ray head and two hosts).

    python benchmarks/cli.py [--repeats 7]

Each command runs as a fresh process, as typed in a shell; the figure is the median wall
time. `python -c pass` is the floor every command pays. To compare with another version,
run it with that checkout first on PYTHONPATH.
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
name: clibench
slices:
  - accelerator: v4-16
simulation:
  create_latency_s: 0.0
  delete_latency_s: 0.0
"""


def timed(argv: list[str], env: dict[str, str], repeats: int) -> float | None:
    """Median seconds of `argv` over `repeats` runs (one unmeasured run first, for the page
    cache); None when the command fails (an older version without it)."""
    if subprocess.run(argv, env=env, capture_output=True).returncode != 0:
        return None
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run(argv, env=env, check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    opts = parser.parse_args()
    home = tempfile.mkdtemp(prefix="pm-clibench-")
    env = {**os.environ, "PODMANAGER_HOME": home}
    podmanager = str(Path(sys.executable).with_name("podmanager"))
    spec = Path(home) / "spec.yaml"
    spec.write_text(SPEC)
    up = subprocess.run([podmanager, "up", "-f", str(spec), "--dry-run"], env=env, capture_output=True, text=True)
    if up.returncode != 0:
        subprocess.run([podmanager, "down", "-c", "clibench"], env=env, capture_output=True)
        raise SystemExit(f"up failed (exit {up.returncode}):\n{up.stdout[-3000:]}{up.stderr[-3000:]}")
    # As for any cluster a few seconds after `up`: the host monitor has written its first view
    # (versions without a monitor wait the 15 s out).
    monitor_view = Path(home) / "clusters" / "clibench" / "hosts.json"
    waited = time.monotonic()
    while not monitor_view.exists() and time.monotonic() - waited < 15:
        time.sleep(0.2)
    try:
        figures = {
            "python -c pass": timed([sys.executable, "-c", "pass"], env, opts.repeats),
            "podmanager --help": timed([podmanager, "--help"], env, opts.repeats),
            "podmanager status -c clibench": timed([podmanager, "status", "-c", "clibench"], env, opts.repeats),
            "podmanager status -c clibench --json": timed([podmanager, "status", "-c", "clibench", "--json"], env,
                                                          opts.repeats),
            "podmanager runs -c clibench": timed([podmanager, "runs", "-c", "clibench"], env, opts.repeats),
        }
    finally:
        subprocess.run([podmanager, "down", "-c", "clibench"], env=env, check=True, capture_output=True)
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"median of {opts.repeats}")
    for command, seconds in figures.items():
        print(f"  {command:40s} " + (f"{seconds:6.2f} s" if seconds is not None else "   n/a"))


if __name__ == "__main__":
    main()
