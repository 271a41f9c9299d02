"""`up` wall time for N slices on the simulated cloud, against the serial sum of create latencies.

    python benchmarks/provision.py [--latency 2.0] [--repeats 3] [--sizes 1 16 64 256]

Real clock, control-plane-only simulation (no Ray hosts), state and simulated cloud in a
temporary $PODMANAGER_HOME. `up` is timed in a fresh state folder (a first `up`: it starts the project's
emulator) and again with the emulator already running (every later command). Prints a
markdown table; median of --repeats runs per size.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time


def measure(slices: int, latency: float) -> tuple[float, float | None]:
    """(`up` in a fresh state folder, `up` with the project's emulator already running); the
    second is None on a version without an emulator process."""
    from podmanager.api import Cluster

    try:
        from podmanager.emulator import launcher
    except ImportError:
        try:  # the layout before issue 35 (a back-to-back baseline)
            from podmanager.operations import emulator_process as launcher  # type: ignore[no-redef]
        except ImportError:  # a version before the emulator process
            launcher = None  # type: ignore[assignment]
    spec = {"name": "bench", "backend": "simulated",
            "simulation": {"create_latency_s": latency, "delete_latency_s": 0.0, "boot_hosts": False},
            "slices": [{"accelerator": "v4-8", "count": slices}]}
    times: list[float | None] = []
    for warm in (False, True):
        if warm and launcher is None:
            times.append(None)
            continue
        with tempfile.TemporaryDirectory() as home:
            os.environ["PODMANAGER_HOME"] = home
            # The simulated cloud in the same temporary folder (each measure's own; its default
            # is the user's one simulated cloud, shared with every other dry run of the user).
            os.environ["PODMANAGER_SIM_HOME"] = os.path.join(home, "sim")
            if warm:
                launcher.ensure("podmanager-sim")
            cluster = Cluster.from_dict(spec)
            start = time.perf_counter()
            cluster.up()
            times.append(time.perf_counter() - start)
            cluster.down()
            cluster.store.close()
    return times[0], times[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 16, 64, 256])
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"create latency {args.latency}s; median of {args.repeats}")
    print()
    print("| slices | `up` wall time (s) | with the emulator running (s) | serial sum (s) | speed-up |")
    print("|---:|---:|---:|---:|---:|")
    for size in args.sizes:
        runs = [measure(size, args.latency) for _ in range(args.repeats)]
        cold = statistics.median(r[0] for r in runs)
        warm = [r[1] for r in runs if r[1] is not None]
        warm_text = f"{statistics.median(warm):.2f}" if warm else "-"
        serial = size * args.latency
        print(f"| {size} | {cold:.2f} | {warm_text} | {serial:.0f} | {serial / cold:.0f}x |")


if __name__ == "__main__":
    main()
