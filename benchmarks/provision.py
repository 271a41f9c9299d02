"""`up` wall time for N slices on the simulated cloud, against the serial sum of create latencies.

    python benchmarks/provision.py [--latency 2.0] [--repeats 3] [--sizes 1 16 64 256]

Real clock, control-plane-only simulation (no Ray hosts), state in a temporary
$PODMANAGER_HOME. Prints a markdown table; median of --repeats runs per size.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time


def measure(slices: int, latency: float) -> float:
    from podmanager.api import Cluster

    with tempfile.TemporaryDirectory() as home:
        os.environ["PODMANAGER_HOME"] = home
        cluster = Cluster.from_dict({
            "name": "bench",
            "backend": "simulated",
            "simulation": {"create_latency_s": latency, "delete_latency_s": 0.0, "boot_hosts": False},
            "slices": [{"accelerator": "v4-8", "count": slices}],
        })
        start = time.perf_counter()
        cluster.up()
        elapsed = time.perf_counter() - start
        cluster.down()
        cluster.store.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 16, 64, 256])
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"create latency {args.latency}s; median of {args.repeats}")
    print()
    print("| slices | `up` wall time (s) | serial sum (s) | speed-up | overhead over one latency (s) |")
    print("|---:|---:|---:|---:|---:|")
    for size in args.sizes:
        median = statistics.median(measure(size, args.latency) for _ in range(args.repeats))
        serial = size * args.latency
        print(f"| {size} | {median:.2f} | {serial:.0f} | {serial / median:.0f}x | {median - args.latency:.2f} |")


if __name__ == "__main__":
    main()
