"""Helpers for tests that run a real local Ray cluster of simulated TPU hosts.

Not a conftest: test modules import what they need. Every helper only touches
processes podmanager recorded (or that appeared during the test), never all of Ray.
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import psutil
import pytest
from cluster_pool import register
from homes import use_home

from podmanager.cloud.base import CLUSTER_LABEL, SLICE_LABEL, Node, NodeRequest
from podmanager.controller import head
from podmanager.emulator import vms
from podmanager.emulator.sim.cloud import SimCloud
from podmanager.vm import procs

if TYPE_CHECKING:
    from podmanager.api import Cluster
    from podmanager.core.spec import ClusterSpec
    from podmanager.emulator.server import Emulator

ZONE = "sim-zone-a"


def _is_ray(name: str, cmdline: list[str]) -> bool:
    """Ray's daemons and workers: raylet, gcs_server, `ray::` workers, and Python processes
    running Ray's own modules (dashboard, agents, log monitor, default worker)."""
    if name in ("raylet", "gcs_server") or any(part.startswith("ray::") for part in cmdline[:1]):
        return True
    return any("/site-packages/ray/" in part or part.startswith("ray.") for part in cmdline[1:3])


def ray_like() -> set[int]:
    """Pids of processes that look like Ray."""
    found = set()
    for proc in psutil.process_iter(["pid", "name", "cmdline"]):
        try:
            if _is_ray(proc.info["name"] or "", proc.info["cmdline"] or []) and proc.status() != psutil.STATUS_ZOMBIE:
                found.add(proc.info["pid"])
        except psutil.Error:
            continue
    return found


def cluster_machines(cluster: str) -> set[str]:
    """Machine ids of the head and the simulated hosts podmanager recorded for `cluster`."""
    machines = {r["machine_id"] for r in vms.host_records(cluster)}
    state = head.load_state(cluster)
    if state is not None and state.machine_id:
        machines.add(state.machine_id)
    return machines


def mine(pid: int, home: str | None) -> bool:
    """Whether a process is this test process's: tagged with an owner in `home` (a cluster of
    this module's), or untagged and started from this process. Another test file's Ray (the
    suite runs two files at once) is neither."""
    try:
        proc = psutil.Process(pid)
        owner = proc.environ().get(procs.OWNER_ENV)
        if owner is not None:
            return home is not None and owner.endswith(f"@{Path(home).resolve()}")
        return os.getpid() in {parent.pid for parent in proc.parents()}
    except psutil.Error:
        return False


def leftovers(machines: set[str], before: set[int] | None, home: str | None = None) -> list[str]:
    """Live processes of `machines`, plus (unless `before` is None) Ray-like processes of this
    test process's (`mine`) that did not exist in `before`."""
    new = {pid for pid in ray_like() - before if mine(pid, home)} if before is not None else set()
    live = procs.machines()
    ours = {proc.pid for machine_id in machines for proc in live.get(machine_id, [])}
    out = []
    for proc in psutil.process_iter(["pid", "name", "cmdline"]):
        if proc.info["pid"] in new or proc.info["pid"] in ours:
            out.append(f"{proc.info['pid']} {proc.info['name']} {' '.join(proc.info['cmdline'] or [])[:80]}")
    return out


def wait_no_leftovers(machines: set[str], before: set[int] | None, timeout_s: float = 15.0,
                      home: str | None = None) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while True:
        left = leftovers(machines, before, home)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.25)


def create_ready_nodes(
    cloud: SimCloud, clock, cluster: str, accelerators: list[str], metadata: dict[str, str]
) -> list[Node]:
    """One node per accelerator, named <cluster>-s<i>, labelled as podmanager's; all READY."""
    for index, accelerator in enumerate(accelerators):
        cloud.create_node(
            ZONE,
            f"{cluster}-s{index}",
            NodeRequest(
                accelerator, "tpu-ubuntu2204-base",
                labels={CLUSTER_LABEL: cluster, SLICE_LABEL: str(index)}, metadata=metadata,
            ),
        )
    clock.advance(cloud.create_latency_s + 0.1)
    return sorted(cloud.list_nodes(ZONE), key=lambda n: n.name)


@contextlib.contextmanager
def booting_emulator(spec: "ClusterSpec", clock) -> Iterator[tuple["Emulator", dict[str, str]]]:
    """An in-process emulator of the spec's project (on `clock`) whose READY nodes boot as
    simulated VMs, through their startup script as every VM does, and the metadata to create
    the cluster's nodes with: the head's address (the head is started) and the startup script,
    the token secret made in the emulator's Secret Manager. Stops the emulator, not the VMs."""
    from podmanager.controller.cluster_hosts import ClusterHosts
    from podmanager.emulator.server import Emulator

    emulator = Emulator(spec.project or "", persist=False, create_latency_s=0.5, delete_latency_s=0.1, clock=clock)
    try:
        emulator.serve_rest()
        address = f"127.0.0.1:{emulator.start()}"
        hosts = ClusterHosts(spec, vms.SimulatedMachines(), secrets_host=lambda: address)
        metadata = hosts.start()
        hosts.head_ready()
        yield emulator, metadata
    finally:
        emulator.stop()


def hand_over_clean(cluster: "Cluster") -> list[str]:
    """Make a shared cluster as the spec says, and say what the previous test had left: runs
    and services still going are cancelled, the simulator's pending faults cleared, and slices
    (spares included) that are not as the spec says made so by `up`. A failure then stays the
    one test's, not every later one's. (Which slice is the spare is whatever the last swap left.)"""
    left = []
    for service in cluster.services_store.serving(cluster.name):
        left.append(f"service {service.service_id} still serving")
        cluster.cancel_service(service.service_id)
    for run in cluster.runs_store.active(cluster.name):
        left.append(f"run {run.run_id} still {run.status}")
        cluster.run_handle(run.run_id).cancel(timeout_s=120.0)
    # A test may slow the cluster's creates (`configure_cluster`): back to the spec's, which
    # changes nothing if they are (the simulator keeps no other record to tell it by).
    simulation = cluster.spec.simulation
    cluster.simulator.configure_cluster(cluster.name, simulation.create_latency_s, simulation.delete_latency_s,
                                        simulation.vm_image, boot_delay_s=simulation.boot_delay_s)
    faults = cluster.simulator.pending_faults()
    if faults != type(faults)():
        left.append(f"pending faults {faults.model_dump(exclude_defaults=True)}")
        cluster.simulator.clear_faults()
    plan = cluster.plan_up()
    if any(change.kind != "keep" for change in plan.changes):
        left.append(f"slices not as the spec says: {plan.describe()}")
        cluster.up(timeout_s=180)
    return left


def module_cluster(spec: dict):  # type: ignore[no-untyped-def]
    """The fixtures of a test module that runs on a dry-run cluster of `spec`, shared with every
    module of the same spec (`cluster_pool`): `home` (the cluster's), `cluster`, and
    `_shared_home`, which points each test's PODMANAGER_HOME at the cluster's home (conftest
    gives every test its own) and hands the test the cluster clean (`hand_over_clean`). The
    module must bind them to these names (the pool finds a test's cluster by its module's
    `cluster`):

        home, cluster, _shared_home = module_cluster(SPEC)
    """

    @pytest.fixture
    def home(cluster_pool):  # type: ignore[no-untyped-def]
        return cluster_pool.get(spec).home

    @pytest.fixture
    def cluster(cluster_pool):  # type: ignore[no-untyped-def]
        return cluster_pool.get(spec).cluster

    @pytest.fixture(autouse=True)
    def _shared_home(cluster, home, podmanager_home, monkeypatch):  # type: ignore[no-untyped-def]
        use_home(monkeypatch, home)
        left = hand_over_clean(cluster)
        if left:  # the previous test's failure (or leak) is reported there; here it is only repaired
            warnings.warn(f"repaired what an earlier test left on {cluster.name}: {'; '.join(left)}", stacklevel=1)

    register(cluster, spec)
    return home, cluster, _shared_home
