"""Issue 47's remaining figures: `podmanager demo` in the loopback mode and in the namespace mode,
back to back on one commit, with the memory each simulated machine holds.

    python benchmarks/network_demo.py [--rounds 1]

Each demo runs in fresh homes (`PODMANAGER_HOME`, `PODMANAGER_SIM_HOME`) with
`PODMANAGER_SIM_NETWORK` set to the mode. Every 2 s the processes of the demo's simulated
machines (the controller VM and each TPU VM host, found by their tags, `vm/procs.py`, and by
the owner naming this demo's simulated cloud) are summed per machine (RSS); a machine's figure is its
peak. Prints the wall time and the median peak per machine of each kind. The namespace mode
needs Linux as root.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from podmanager.vm import procs

SAMPLE_S = 2.0


def sample(cloud: str, peaks: dict[str, float], stop: threading.Event) -> None:
    """Each machine's peak RSS (MiB) of this demo's machines, by machine id: a simulated VM's
    owner names the simulated cloud's folder (`procs.sim_owner`)."""
    while not stop.wait(SAMPLE_S):
        totals: dict[str, float] = {}
        for proc, (machine_id, owner) in procs._scan():  # noqa: SLF001 - the one scan of the tags
            if machine_id and owner and owner.endswith(f"@{cloud}"):
                try:
                    totals[machine_id] = totals.get(machine_id, 0.0) + proc.memory_info().rss / 2**20
                except psutil.Error:
                    continue
        for machine_id, mib in totals.items():
            peaks[machine_id] = max(peaks.get(machine_id, 0.0), mib)


def one_demo(mode: str) -> tuple[float, list[float], int]:
    """Wall seconds, each machine's peak MiB, the demo's exit code."""
    with tempfile.TemporaryDirectory(prefix=f"pm-demo-{mode}-") as root:
        cloud = Path(root) / "cloud"
        env = {**os.environ, "PODMANAGER_HOME": str(Path(root) / "home"), "PODMANAGER_SIM_HOME": str(cloud),
               "PODMANAGER_SIM_NETWORK": mode}
        peaks: dict[str, float] = {}
        stop = threading.Event()
        sampler = threading.Thread(target=sample, args=(str(cloud.resolve()), peaks, stop), daemon=True)
        sampler.start()
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "podmanager", "demo"], cwd=root, env=env,
                              capture_output=True, text=True)
        wall = time.monotonic() - started
        stop.set()
        sampler.join()
        if done.returncode != 0:
            print(done.stdout[-2000:], done.stderr[-2000:], file=sys.stderr)
        return wall, sorted(peaks.values()), done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    print(f"load at start: {os.getloadavg()[0]:.1f}; {os.cpu_count()} cores")
    print("| round | network | demo s | machines | median peak RSS per machine MiB | max MiB | exit |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for round_ in range(1, args.rounds + 1):
        for mode in ("loopback", "namespaces"):
            load = os.getloadavg()[0]
            wall, peaks, code = one_demo(mode)
            median = statistics.median(peaks) if peaks else 0.0
            print(f"| {round_} (load {load:.1f}) | {mode} | {wall:.1f} | {len(peaks)} | {median:.0f} | "
                  f"{max(peaks, default=0.0):.0f} | {code} |", flush=True)


if __name__ == "__main__":
    main()
