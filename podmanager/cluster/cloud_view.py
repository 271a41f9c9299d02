"""The cluster's slices as the cloud last reported them: `clusters/<name>/slices.json`.

The cluster's monitor (`controller/monitor.py`, a Ray actor next to the head) runs a `CloudWatcher`
once a second: it lists a dry run's slices every second, Google Cloud's every ten seconds (the
API has read quotas), and asks again for the boot stages of a slice whose hosts all joined once
a minute. `status` shows that view instead of asking the cloud itself, so it loads neither
Google's client nor Ray and makes no API call, however many slices the cluster has. It asks
the cloud itself when the view is missing, older than a few of the watcher's periods, or older
than the cluster's last event: whatever podmanager changed (`up`, a recovery, a `podmanager
sim` fault) is recorded after it is done, so `status` never shows what was before it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

from pydantic import TypeAdapter

from podmanager.cloud.base import Node, NodeState, TpuCloud
from podmanager.cluster.boot_watch import boot_statuses
from podmanager.controller.cluster_hosts import ClusterHosts
from podmanager.core import paths
from podmanager.core.files import write_atomic
from podmanager.core.spec import ClusterSpec
from podmanager.provisioning.plan import Observed
from podmanager.vm.boot_status import JOINED, BootStatus

VIEW_FILE = "slices.json"
SIMULATED_PERIOD_S = 1.0
CLOUD_PERIOD_S = 10.0
BOOTS_REREAD_S = 60.0  # a node whose every host joined is asked again this seldom (the stage rarely moves then)
STALE_AFTER_PERIODS = 3  # a slow round must not send status to the API


@dataclass(frozen=True)
class NodeBoots:
    """One node's hosts' boot stages (worker -> what it reported), as read at `read_at`."""

    node: str
    create_time: float | None
    read_at: float
    workers: dict[int, BootStatus] = field(default_factory=dict)


@dataclass(frozen=True)
class CloudView:
    observed_at: float  # unix time the listing started
    nodes: list[Node]
    boots: list[NodeBoots] = field(default_factory=list)  # READY nodes only (a VM reports only while it runs)

    def boots_of(self, node: Node) -> dict[int, BootStatus]:
        return next((b.workers for b in self.boots if b.node == node.name), {})


_VIEW = TypeAdapter(CloudView)


class WatchedCluster(Protocol):
    """What the view is read through: `ClusterRuntime` (which builds the watcher)."""

    spec: ClusterSpec
    hosts: ClusterHosts | None  # None for a control-plane-only dry run: no VM reports a boot stage
    cloud: TpuCloud

    def observe(self) -> Observed: ...

    def refresh_spec(self) -> None: ...


def path(cluster: str) -> Path:
    return paths.cluster_dir(cluster) / VIEW_FILE


def period_s(simulated: bool) -> float:
    return SIMULATED_PERIOD_S if simulated else CLOUD_PERIOD_S


def observe(runtime: WatchedCluster, previous: CloudView | None = None, reread_s: float = 0.0) -> CloudView:
    """The cluster's nodes now, and the boot stages of its READY nodes' hosts. A node whose
    hosts had all joined in `previous` (the same node: same creation time) is not asked again
    until `reread_s` after that reading."""
    started = time.time()
    nodes = list(runtime.observe().nodes)
    boots = []
    if runtime.hosts is not None:
        for node in nodes:
            if node.state is NodeState.READY:
                boots.append(_boots(runtime.cloud, node, previous, reread_s, started))
    return CloudView(started, nodes, boots)


def _boots(cloud: TpuCloud, node: Node, previous: CloudView | None, reread_s: float, now: float) -> NodeBoots:
    kept = next((b for b in previous.boots if b.node == node.name), None) if previous else None
    settled = (kept is not None and kept.create_time == node.create_time and kept.workers
               and len(kept.workers) == max(1, len(node.endpoints))
               and all(b.stage == JOINED for b in kept.workers.values()))
    if settled and now - kept.read_at < reread_s:
        return kept
    return NodeBoots(node.name, node.create_time, now, boot_statuses(cloud, node))


def read_fresh(cluster: str, *, simulated: bool, newer_than: float | None,
               now: float | None = None) -> CloudView | None:
    """The view if the watcher wrote it within a few periods and after `newer_than` (the
    cluster's last event), else None: then the caller asks the cloud."""
    try:
        view = _VIEW.validate_json(path(cluster).read_bytes())
    except (OSError, ValueError):  # missing, half-written by another version, unreadable
        return None
    now = time.time() if now is None else now
    if not 0.0 <= now - view.observed_at <= STALE_AFTER_PERIODS * period_s(simulated):
        return None
    if newer_than is not None and view.observed_at <= newer_than:
        return None
    return view


def write(cluster: str, view: CloudView) -> None:
    write_atomic(path(cluster), _VIEW.dump_json(view).decode())


def remove(cluster: str) -> None:
    path(cluster).unlink(missing_ok=True)


class CloudWatcher:
    """Called by the cluster's monitor about once a second; reads the cloud once a period and
    writes the view. `open_cluster(name)` builds what it reads through, in the monitor's
    process (its cloud client lives there)."""

    def __init__(self, cluster: str, open_cluster: Callable[[str], WatchedCluster]):
        self.cluster = cluster
        self.open_cluster = open_cluster
        self._runtime: WatchedCluster | None = None
        self._view: CloudView | None = None
        self._next = 0.0

    def __call__(self) -> None:
        if time.time() < self._next:
            return
        if self._runtime is None:
            self._runtime = self.open_cluster(self.cluster)
        self._runtime.refresh_spec()  # a later `up` may have edited the slices
        self._next = time.time() + period_s(self._runtime.spec.simulated)
        self._view = observe(self._runtime, self._view, reread_s=BOOTS_REREAD_S)
        write(self.cluster, self._view)
