"""Benchmark: simulated TPU hosts as real Ray nodes — boot time and memory per host.

    python benchmarks/hosts.py [--hosts 1 2 4 8]

For each size, one slice with that many hosts (v4-8, v4-16, v4-32, v4-64) is made
READY in the simulator; SimHostBooter boots its hosts in parallel and HostController
waits until every host's agent answers its probe. Reported: head start time, time
from READY to all agents healthy, and the PSS of each host's processes (raylet, Ray's
per-node agents, the HostAgent worker) averaged over hosts. Everything runs in a
temporary PODMANAGER_HOME and is stopped afterwards.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time

import psutil

SHAPES = {1: "v4-8", 2: "v4-16", 4: "v4-32", 8: "v4-64"}


def host_pss_mib(cluster: str) -> list[float]:
    from podmanager.emulator import vms

    out = []
    for pids in vms.host_pids(cluster).values():
        total = 0
        for pid in pids:
            try:
                total += psutil.Process(pid).memory_full_info().pss
            except psutil.Error:
                continue
        out.append(total / 2**20)
    return out


def head_pss_mib(cluster: str) -> float:
    from podmanager.controller import head
    from podmanager.vm import procs

    state = head.load_state(cluster)
    total = 0
    for proc in procs.members(state.machine_id) if state else []:
        try:
            total += proc.memory_full_info().pss
        except psutil.Error:
            continue
    return total / 2**20


def run(hosts: int) -> dict:
    from podmanager.cloud.base import CLUSTER_LABEL, SLICE_LABEL, NodeRequest
    from podmanager.controller.host_controller import HostController
    from podmanager.core.clock import FakeClock
    from podmanager.core.spec import parse_spec
    from podmanager.emulator import vms
    from podmanager.emulator.sim.cloud import SimCloud

    cluster = f"bench{hosts}"
    accelerator = SHAPES[hosts]
    spec = parse_spec({"name": cluster, "backend": "simulated", "slices": [{"accelerator": accelerator}]})
    controller = HostController(spec, vms.SimulatedMachines())
    clock = FakeClock()
    cloud = SimCloud(clock=clock, listeners=[vms.SimHostBooter()])
    try:
        started = time.monotonic()
        address = controller.start_head()
        head_s = time.monotonic() - started
        cloud.create_node(
            "sim-zone-a", f"{cluster}-s0",
            NodeRequest(accelerator, "tpu-ubuntu2204-base", labels={CLUSTER_LABEL: cluster, SLICE_LABEL: "0"},
                        metadata=controller.node_metadata()),
        )
        clock.advance(1.0)
        ready = time.monotonic()
        nodes = cloud.list_nodes("sim-zone-a")  # the READY transition boots the hosts
        infos = controller.wait_for_hosts(nodes, timeout_s=300)
        boot_s = time.monotonic() - ready
        assert len(infos) == hosts and all(h.healthy for h in infos), address
        time.sleep(2.0)  # let start-up allocations settle before measuring
        per_host = host_pss_mib(cluster)
        return {
            "hosts": hosts, "accelerator": accelerator, "head_s": head_s, "boot_s": boot_s,
            "pss_mean": sum(per_host) / len(per_host), "pss_max": max(per_host), "head_pss": head_pss_mib(cluster),
        }
    finally:
        controller.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[1, 2, 4, 8], choices=sorted(SHAPES))
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pm-bench-") as home:
        os.environ["PODMANAGER_HOME"] = home
        rows = [run(n) for n in opts.hosts]
    cpu = f"{psutil.cpu_count()} cores"
    mem = f"{psutil.virtual_memory().total / 2**30:.0f} GiB"
    print(f"Machine: {platform.machine()}, {cpu}, {mem}, Python {sys.version.split()[0]}, Linux {platform.release()}")
    print("Command: python benchmarks/hosts.py --hosts " + " ".join(map(str, opts.hosts)))
    print()
    print("| hosts | slice | head start (s) | READY -> all agents healthy (s) "
          "| PSS per host, mean (MiB) | PSS per host, max (MiB) | head PSS (MiB) |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['hosts']} | {r['accelerator']} | {r['head_s']:.1f} | {r['boot_s']:.1f} "
              f"| {r['pss_mean']:.0f} | {r['pss_max']:.0f} | {r['head_pss']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
