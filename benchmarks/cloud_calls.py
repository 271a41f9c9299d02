"""The supervisor's Cloud TPU API calls per minute while a run is going, and its detection time.

    python benchmarks/cloud_calls.py [--minutes 10] [--runs 1 2 4] [--zones 1 2]

While an attempt runs, the supervisor's only cloud calls are its health monitor's
(`supervision/health.py`): each check lists the nodes of every zone the run's slices are in.
This drives that monitor as the attempt runner does (a check every 0.25 s) on a fake clock,
through the real client (`GcpCloud`, google-cloud-tpu) to an in-process emulator, and counts
the API requests the emulator received over a simulated window: no Ray, no processes, and
the clock makes the figure independent of the machine's speed. Each of `--runs` runs on one
cluster has its own supervisor (as on a real cluster), with one slice per zone, and its own
handle on the cluster's shared listing (`cluster/shared_listing.py`), as separate
processes would; their checks are spread over each quarter second.

Detection: a slice is preempted at 20 moments spread over one health interval, and the time
until the monitor reports it is taken (the figure the calls buy).
"""

from __future__ import annotations

import argparse
import collections
import statistics
import tempfile
from pathlib import Path

from podmanager.cloud.base import CLUSTER_LABEL, SLICE_LABEL, NodeRequest
from podmanager.cloud.gcp.client import GcpCloud
from podmanager.cluster.shared_listing import SharedZoneListing
from podmanager.core.clock import FakeClock
from podmanager.core.records import SliceRef
from podmanager.core.spec import Capacity
from podmanager.emulator.sim.cloud import SimCloud
from podmanager.emulator.tpu_api import TpuEmulator
from podmanager.supervision.health import HealthMonitor

POLL_S = 0.25  # the attempt runner's poll: how often it calls the monitor's check
INTERVAL_S = 1.0  # health.interval_s, the default


class _Gang:
    """What the monitor reads of a gang: no hosts' progress, no notices."""

    hosts: list = []

    def any_notice(self, index: int) -> bool:
        return False

    def signal(self, signum: int) -> None:
        pass


def rig(runs: int, zones: int, own_listing: bool = False) -> tuple[FakeClock, SimCloud, TpuEmulator, GcpCloud, list[HealthMonitor], object]:
    clock = FakeClock()
    folder = Path(tempfile.mkdtemp(prefix="pm-bench-listing-"))
    names = [f"zone-{chr(ord('a') + z)}" for z in range(zones)]
    sim = SimCloud("bench", clock=clock, create_latency_s=0.0, delete_latency_s=0.0, zones=names)
    emulator = TpuEmulator(sim)
    server, port = emulator.serve()
    cloud = GcpCloud("bench", emulator_host=f"127.0.0.1:{port}", clock=clock, poll_interval_s=1.0)
    monitors = []
    index = 0
    for _ in range(runs):
        refs = []
        for zone in names:
            name = f"c-s{index}"
            sim.create_node(zone, name, NodeRequest("v4-8", "rt", Capacity.SPOT,
                                                    labels={CLUSTER_LABEL: "c", SLICE_LABEL: str(index)}))
            refs.append(SliceRef(index, zone, name))
            index += 1
        # As each run's supervisor builds it: its own handle on the cluster's shared listing.
        shared = SharedZoneListing(cloud, folder)
        monitors.append(HealthMonitor(cloud, refs, _Gang(), interval_s=INTERVAL_S, clock=clock,  # type: ignore[arg-type]
                                      list_zone=None if own_listing else shared.list_nodes))
    return clock, sim, emulator, cloud, monitors, server


def calls_per_minute(runs: int, zones: int, minutes: float, own_listing: bool) -> dict[str, float]:
    clock, _, emulator, cloud, monitors, server = rig(runs, zones, own_listing)
    try:
        emulator.requests.clear()
        steps = int(minutes * 60 / POLL_S)
        for _ in range(steps):
            for monitor in monitors:  # the runs' supervisors are not in step: spread over each poll
                assert monitor.check() is None
                clock.advance(POLL_S / len(monitors))
        counted = collections.Counter(name for name, _ in emulator.requests)
        return {name: count / minutes for name, count in counted.items()}
    finally:
        cloud.close()
        server.stop(grace=None).wait()  # type: ignore[attr-defined]


def detection_s(own_listing: bool, samples: int = 20) -> list[float]:
    """Preemption -> the monitor reports it, for preemptions spread over one interval."""
    found = []
    for k in range(samples):
        clock, sim, _, cloud, [monitor], server = rig(1, 1, own_listing)
        try:
            assert monitor.check() is None
            clock.advance(INTERVAL_S * k / samples)
            monitor.check()
            sim.preempt("zone-a", "c-s0")
            at = clock.now()
            while monitor.check() is None:
                clock.advance(POLL_S)
            found.append(clock.now() - at)
        finally:
            cloud.close()
            server.stop(grace=None).wait()  # type: ignore[attr-defined]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--runs", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--zones", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--own-listing", action="store_true",
                        help="each supervisor lists its zones itself, as before the shared listing")
    args = parser.parse_args()
    print("| runs | zones | ListNodes/min | all API calls/min |\n|---:|---:|---:|---:|")
    for zones in args.zones:
        for runs in args.runs:
            per_minute = calls_per_minute(runs, zones, args.minutes, args.own_listing)
            print(f"| {runs} | {zones} | {per_minute.get('ListNodes', 0.0):.0f} | {sum(per_minute.values()):.0f} |")
    found = detection_s(args.own_listing)
    print(f"\ndetection (preemption -> reported), {len(found)} moments over one interval: "
          f"median {statistics.median(found):.2f} s, max {max(found):.2f} s")


if __name__ == "__main__":
    main()
