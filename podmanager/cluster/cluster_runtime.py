"""One cluster as `up`, `down` and a run's supervisor drive it: converging it to its spec,
and deleting and replacing slices, over what `ClusterAccess` reaches (its cloud backend,
its Ray side, its event log and lock).

This is the supervisor's port (`supervision/ports.py::SupervisedCluster`) and nothing
more: the user's verbs are `api.Cluster`, which holds one of these. A run's supervisor
builds its own with `ClusterRuntime.from_name`, so no class travels through Ray.
"""

from __future__ import annotations

from typing import Any, Callable, ContextManager

from podmanager.cloud.base import DEAD_STATES, Node, NodeState, Operation
from podmanager.cluster.backends import configure_simulation
from podmanager.cluster.boot_watch import BootWatch, failed_boots, ready_boots
from podmanager.cluster.cluster_access import ClusterAccess, EventCallback
from podmanager.cluster.shared_listing import SharedZoneListing
from podmanager.cluster.software_drift import software_drift
from podmanager.controller.staging import wanted_versions
from podmanager.core import catalog, paths, spares
from podmanager.core.cadence import Cadence
from podmanager.core.clock import poll_until
from podmanager.core.errors import PodmanagerError, SpecError
from podmanager.core.events import EventKind
from podmanager.core.records import HostSlot, SliceRef
from podmanager.provisioning.plan import (
    SliceChange,
    changes,
    describe_changes,
    desired_slices,
)
from podmanager.serving.router import ReplicaLoss

__all__ = ["ClusterRuntime", "EventCallback"]

RECOVERY_LOCK_TIMEOUT_S = 1800.0  # a run's recovery waits this long for an `up` or `down` to finish


class ClusterRuntime(ClusterAccess):
    _listing: SharedZoneListing | None = None  # made when a supervisor first checks the cloud

    def zone_nodes(self, zone: str, slot: int) -> list[Node]:
        """The zone's nodes as listed in this health slot, shared by the cluster's supervisors."""
        if self._listing is None:
            self._listing = SharedZoneListing(self.cloud, paths.cluster_dir(self.name) / "listing")
        return self._listing.list_nodes(zone, slot)

    def _recovery_lock(self) -> ContextManager[None]:
        verb = f"recovery for run {self.run_id}" if self.run_id else "recovery"
        return self.lock(verb, RECOVERY_LOCK_TIMEOUT_S)

    # ------------------------------------------------------------------ converging

    def plan_changes(self) -> list[SliceChange]:
        """What converging to the spec would do to each slice now, and the READY slices whose
        hosts failed to boot, or run other software than a boot now would install, replaced
        (their startup script runs only at boot)."""
        observed = self.observe()
        boots = ready_boots(self.cloud, observed.nodes) if self.hosts else {}
        drifted = software_drift(boots, wanted_versions(self.spec)) if boots else {}
        return changes(desired_slices(self.spec), observed, failed_boots(boots), drifted)

    def bring_up(self, changes: list[SliceChange], timeout_s: float, *,
                 before_converge: Callable[[], None] | None = None) -> list[Node]:
        """Store the spec, record the plan (`changes`), start the head, converge the cloud to
        the spec and wait for every host's agent: `up`, and a recovery's heal. The caller
        holds the cluster's lock. `before_converge` runs once the plan is recorded."""
        self.store.save_cluster(self.name, self.spec, "provisioning")
        self.record(EventKind.UP, f"{len(self.spec.slice_list())} slice(s) on {self.spec.backend.value} "
                    f"in {', '.join(self.spec.zones)}")
        cost = spares.describe_cost(self.spec)
        self.record(EventKind.UP_PLAN, f"plan for {self.name}: {describe_changes(changes)}" + (f"; {cost}" if cost else ""),
                    changes=[c.as_dict() for c in changes], spares=cost)
        if self.spec.simulated and self._backend_from_spec:
            configure_simulation(self.spec, self.simulator)
        if before_converge is not None:
            before_converge()
        metadata = self._start_head() if self.hosts else {}
        failed = [c.slice_index for c in changes if c.failed_boot and c.slice_index is not None]
        if failed:
            self._delete_only(failed, timeout_s, reason="a host failed to boot, or the slice booted with other "
                                                        "boot settings; a new slice boots again")
        nodes = self._converge(desired_slices(self.spec, metadata), timeout_s)
        self.record(EventKind.SLICES_READY, f"all {len(nodes)} slice(s) READY")
        self._refresh_metadata(nodes, metadata)
        if self.hosts:
            self._wait_for_hosts(nodes)
        self.store.set_cluster_status(self.name, "up")
        return nodes

    def _start_head(self) -> dict[str, str]:
        """Start (or reuse) the Ray head, saying so first. A new one comes up while the slices
        are created (their hosts wait for it); `_wait_for_hosts` waits for it first."""
        assert self.hosts is not None
        running = self.spec.head.address or self.hosts.head_address()
        self.record(EventKind.HEAD_STARTING, f"using the Ray head at {running}" if running
                    else "starting the Ray head (it comes up while the slices are made)")
        return self.hosts.start()

    def _refresh_metadata(self, nodes: list[Node], metadata: dict[str, str]) -> None:
        """Give slices made before this head (or this startup script) the metadata a new one
        gets: their VMs read the head's address from it on every join try, so they rejoin a
        restarted head without being re-created."""
        stale = [n for n in nodes if any(n.metadata.get(key) != value for key, value in metadata.items())]
        if not stale:
            return
        self.record(EventKind.METADATA_UPDATE, f"telling {len(stale)} slice(s) the current head and startup script: "
                    + ", ".join(n.name for n in stale))
        operations = [self.cloud.update_node_metadata(n.zone, n.name, {**n.metadata, **metadata}) for n in stale]
        def finished(name: str) -> Operation | None:
            polled = self.cloud.get_operation(name)
            return polled if polled.done else None

        poll = Cadence.for_spec(self.spec).metadata_poll_s
        for operation in operations:
            done = poll_until(lambda: finished(operation.name), timeout_s=300.0, interval_s=poll, clock=self.clock,
                              what=f"updating the metadata of the slices of {self.name}")
            if done.error is not None:
                raise done.error

    def _wait_for_hosts(self, nodes: list[Node]) -> None:
        """Wait until every host of these slices has a healthy agent, saying how many have."""
        assert self.hosts is not None
        if self.hosts.head_ready():
            self.record(EventKind.HEAD_READY, f"Ray head is up at {self.hosts.head_address()}")
        expected = sum(len(node.endpoints) or catalog.lookup(node.accelerator_type).hosts for node in nodes)
        self.record(EventKind.HOSTS_JOINING, f"waiting for {expected} host(s) to join Ray "
                    f"(up to {self.spec.head.join_timeout_s:.0f}s)", expected=expected)
        joined = self.hosts.wait_for_hosts(nodes, on_progress=lambda healthy, of: self.record(
            EventKind.HOSTS_JOINING, f"{healthy}/{of} host(s) joined Ray", joined=healthy, expected=of),
            check=BootWatch(self.cloud, nodes, self.record, self.clock, simulated=self.spec.simulated))
        from podmanager.cluster.cluster_monitor import (
            ClusterMonitor,  # loads Ray: not for `status`
        )

        self.hosts.ensure_monitor(ClusterMonitor)  # the hosts' probes, the cloud's view, the hot spares
        self.record(EventKind.HOSTS_JOINED, f"{len(joined)} host(s) joined Ray, each with a healthy agent")

    def _converge(self, desired: list[Any], timeout_s: float, reason: str = "not in the spec") -> list[Node]:
        return self.provisioner().converge(desired, timeout_s, unwanted_reason=reason)

    # ------------------------------------------------------------------ the supervisor's port

    def agents(self, slice_indexes: list[int]) -> list[tuple[HostSlot, Any]]:
        if self.hosts is None:
            raise SpecError("simulation.boot_hosts is false: this dry-run cluster has no hosts")
        return self.hosts.agents(slice_indexes)

    def lost_hosts(self) -> set[tuple[int, int]]:
        """(slice, worker) of hosts whose node is dead or unreachable right now."""
        dead = self.hosts.dead_hosts() if self.hosts else []
        return {(h.slice_index, h.worker_id) for h in dead}

    def slice_locations(self, slice_indexes: list[int]) -> list[SliceRef]:
        """Where each of these slices is as the cloud has it now."""
        nodes = {n.slice_index: n for n in self.observe().nodes}
        missing = [i for i in slice_indexes if i not in nodes]
        if missing:
            raise PodmanagerError(f"slice(s) {missing} of {self.name} do not exist",
                                  hint="Run 'podmanager up' again to create them.")
        return [SliceRef(i, nodes[i].zone, nodes[i].name) for i in slice_indexes]

    def heal(self) -> None:
        """Delete dead slices, create what is missing and wait for every host's agent (a
        run's recovery: the spec is the one the last `up` stored, accepted by that `up`)."""
        with self._recovery_lock():
            self.refresh_spec()
            self._delete_dead_slices(600.0)
            self.bring_up(changes(desired_slices(self.spec), self.observe()), 1800.0)

    def delete_dead_slices(self, timeout_s: float = 600.0) -> list[int]:
        """Delete preempted or terminated slices now (they hold quota) without replacing them."""
        with self._recovery_lock():
            self.refresh_spec()
            return self._delete_dead_slices(timeout_s)

    def _delete_dead_slices(self, timeout_s: float) -> list[int]:
        dead = sorted(n.slice_index for n in self.observe().nodes
                      if n.state in DEAD_STATES and n.slice_index is not None)
        if dead:
            self._delete_only(dead, timeout_s, reason="it is dead and holds quota; 'up' creates it again")
        return dead

    def _delete_only(self, indexes: list[int], timeout_s: float, reason: str) -> None:
        """Delete these slices (and any dead one) and create nothing: a slice missing now (another
        run's, lost meanwhile) is left to `restore_slices`, which creates it with the metadata
        its hosts boot with (a slice created without it would never join)."""
        alive = {n.slice_index for n in self.observe().nodes if n.state not in DEAD_STATES}
        desired = [d for d in desired_slices(self.spec) if d.index not in indexes and d.index in alive]
        self._converge(desired, timeout_s, reason=reason)

    def delete_created(self, indexes: list[int], timeout_s: float = 600.0) -> None:
        """Delete the slices a failed `up` created (its caller holds the cluster's lock)."""
        if indexes:
            self._delete_only(indexes, timeout_s, reason="the up that created it failed (--delete-on-failure)")

    def delete_slices(self, indexes: list[int], *, reason: str, since: float | None = None,
                      timeout_s: float = 1800.0) -> None:
        """Delete these slices now; the first half of replacing them. A slice READY and created
        after `since` (the incident) was replaced meanwhile by another run's recovery (runs on
        a cluster share its recovery lock): it is kept, not replaced twice."""
        with self._recovery_lock():
            self.refresh_spec()
            if since is not None:
                fresh = sorted(n.slice_index for n in self.observe().nodes if n.slice_index in indexes
                               and n.state is NodeState.READY and (n.create_time or 0.0) > since)
                if fresh:
                    self.record(EventKind.SLICES_KEPT, f"slice(s) {fresh} were created again since the incident; kept")
                    indexes = [i for i in indexes if i not in fresh]
            if indexes:
                self._delete_only(indexes, timeout_s, reason=f"replacing it ({reason})")

    def restore_slices(self, phases: dict[str, float] | None = None, *, timeout_s: float = 1800.0) -> list[Node]:
        """Create every missing slice (next zones on capacity errors) and wait for all hosts;
        the second half of replacing. `phases` receives the seconds of `create` and `join`."""
        phases = {} if phases is None else phases
        with self._recovery_lock():
            self.refresh_spec()
            metadata = self.hosts.start() if self.hosts else {}
            started = self.clock.now()
            nodes = self._converge(desired_slices(self.spec, metadata), timeout_s)
            self._refresh_metadata(nodes, metadata)
            phases["create"] = self.clock.now() - started
            if self.hosts:
                started = self.clock.now()
                self._wait_for_hosts(nodes)
                phases["join"] = self.clock.now() - started
        return nodes

    def replica_lost(self, service_id: str, loss: ReplicaLoss) -> None:
        """Tell the service's router, without waiting (the supervisor runs inside the cluster's Ray)."""
        from podmanager.controller.head_actors import find
        from podmanager.serving.router_actor import actor_name

        router = find(actor_name(service_id))
        if router is not None:
            router.replica_lost.remote(loss)

    def dropped_slices(self, indexes: list[int]) -> list[int]:
        """Those of these slices that the cluster's spec, as the last `up` stored it, no
        longer has."""
        self.refresh_spec()
        known = {s.index for s in self.spec.slice_list()}
        return sorted(i for i in indexes if i not in known)
