"""Keeps a cluster's hot spares READY with their hosts joined; the cluster's monitor
(`controller/monitor.py`) runs it once a round, beside the cloud's view (`cloud_view.py`).

Level-triggered: once a period it looks at the spare slices (their roles are in the state
store: `core/spares.py`) as the cloud has them. A dead spare (preempted as a spare, or a
working slice lost and just swapped out of its run) is deleted, a missing one created with
the metadata the cluster's other nodes boot with, and a READY one's hosts get their agents.
The operations start under the cluster's lock, taken only when free (an `up`, `down` or a
run's recovery holding it has the cloud to itself this round), and are waited for in a
thread of the keeper's, so neither the monitor's rounds nor a `down` wait for a create.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from typing import Any, Callable, Protocol

from podmanager.cloud.base import Decision, Node, decide
from podmanager.cluster.cloud_view import period_s
from podmanager.controller.cluster_hosts import ClusterHosts
from podmanager.core import catalog
from podmanager.core.clock import Clock
from podmanager.core.errors import PodmanagerError
from podmanager.core.spec import ClusterSpec
from podmanager.provisioning.loop import Provisioner
from podmanager.provisioning.plan import (
    Action,
    CreateSlice,
    DeleteNode,
    DeleteQueuedResource,
    NoZoneLeft,
    Observed,
    desired_slices,
    node_name,
    plan,
)
from podmanager.state import StateStore
from podmanager.state.lock import cluster_lock
from podmanager.state.run_records import RunStore

log = logging.getLogger(__name__)

CREATE_TIMEOUT_S = 1800.0  # how long one round's creates are waited for (and a queued one stays valid)
SERVING = "up"  # the cluster's status while nothing else (`up`, `down`) is changing it


class KeptCluster(Protocol):
    """What the keeper works through: `ClusterRuntime` (which builds the keeper)."""

    spec: ClusterSpec
    store: StateStore
    clock: Clock

    @property
    def hosts(self) -> ClusterHosts | None: ...

    def observe(self) -> Observed: ...

    def refresh_spec(self) -> None: ...

    def provisioner(self) -> Provisioner: ...

    def record(self, kind: str, message: str, slice_index: int | None = None, **data: Any) -> Any: ...


class SpareKeeper:
    """Called by the cluster's monitor about once a second; acts once a period.
    `open_cluster(name)` builds the runtime it works through, in the monitor's process."""

    def __init__(self, cluster: str, open_cluster: Callable[[str], KeptCluster]):
        self.cluster = cluster
        self.open_cluster = open_cluster
        self._runtime: KeptCluster | None = None
        self._runs: RunStore | None = None  # where the spares are recorded, opened once
        self._next = 0.0
        self._waiting: threading.Thread | None = None  # the creates and deletes of the last round
        self._exhausted: dict[int, set[str]] = defaultdict(set)  # spare -> zones without capacity for it
        self._told_ready: set[tuple[str, float | None]] = set()  # (node, create time) said READY

    def __call__(self) -> None:
        if time.time() < self._next or (self._waiting is not None and self._waiting.is_alive()):
            return
        if self._runtime is None:
            self._runtime = self.open_cluster(self.cluster)
        runtime = self._runtime
        runtime.refresh_spec()  # a later `up` may have changed the spares
        self._next = time.time() + period_s(runtime.spec.simulated)
        if not self._serving(runtime):
            return
        if self._runs is None:
            self._runs = RunStore(runtime.store.path)
        spare_slices = self._runs.spares(self.cluster)
        if not spare_slices:
            return
        observed = runtime.observe()
        names = {node_name(self.cluster, i) for i in spare_slices}
        spares_seen = Observed(tuple(n for n in observed.nodes if n.name in names),
                               tuple(q for q in observed.queued if q.node_name in names))
        metadata = _boot_metadata(observed.nodes, names)
        if metadata is not None:
            desired = [d for d in desired_slices(runtime.spec, metadata) if d.index in spare_slices]
            actions = [a for a in plan(desired, spares_seen, self._exhausted) if not isinstance(a, NoZoneLeft)]
            if actions:
                self._start(runtime, actions, spare_slices)
        ready = [n for n in spares_seen.nodes if decide(n) is Decision.USE
                 and (n.name, n.create_time) not in self._told_ready]
        if ready and runtime.hosts is not None:
            self._place(runtime, ready)

    def _serving(self, runtime: KeptCluster) -> bool:
        record = runtime.store.get_cluster(self.cluster)
        return record is not None and record.status == SERVING

    def _start(self, runtime: KeptCluster, actions: list[Action], spare_slices: list[int]) -> None:
        provisioner = runtime.provisioner()
        deadline = runtime.clock.now() + CREATE_TIMEOUT_S
        try:
            with cluster_lock(self.cluster, "keeping the hot spares", timeout_s=0.0):
                if not self._serving(runtime):  # a `down` finished meanwhile: create nothing
                    return
                runtime.record("spare_upkeep", f"keeping {len(spare_slices)} hot spare(s) of {self.cluster}: "
                               + "; ".join(_what(a) for a in actions), slices=spare_slices)
                started = provisioner.start(actions, deadline)
        except PodmanagerError:  # the lock is busy (or the cloud refused): next round
            return

        def finish() -> None:
            try:
                provisioner.finish(started, self._exhausted, deadline)
            except Exception:  # noqa: BLE001 - one failed create must not stop the keeping
                log.exception("keeping the spares of %s failed", self.cluster)

        self._waiting = threading.Thread(target=finish, name=f"spares-{self.cluster}", daemon=True)
        self._waiting.start()

    def _place(self, runtime: KeptCluster, ready: list[Node]) -> None:
        assert runtime.hosts is not None
        probes = runtime.hosts.place(ready)
        for node in ready:
            hosts = [h for h in probes if h.node_name == node.name]
            expected = len(node.endpoints) or catalog.lookup(node.accelerator_type).hosts
            if len(hosts) == expected and all(h.healthy for h in hosts):
                self._told_ready.add((node.name, node.create_time))
                if node.slice_index is not None:
                    self._exhausted.pop(node.slice_index, None)
                runtime.record("spare_ready", f"hot spare slice {node.slice_index} ({node.name}) is READY with its "
                               f"{expected} host(s) joined", node.slice_index, node=node.name)


def _boot_metadata(nodes: tuple[Node, ...], spares: set[str]) -> dict[str, str] | None:
    """What a new spare boots with: the metadata of the cluster's newest READY working node
    (every `up` and recovery gives all nodes the current head's); None when there is none."""
    working = [n for n in nodes if n.name not in spares and decide(n) is Decision.USE]
    if not working:
        return None
    return dict(max(working, key=lambda n: n.create_time or 0.0).metadata)


def _what(action: Action) -> str:
    if isinstance(action, CreateSlice):
        return f"create {action.slice.node_name} in {action.zone}"
    if isinstance(action, (DeleteNode, DeleteQueuedResource)):
        return f"delete {action.name} ({action.reason})"
    return str(action)
