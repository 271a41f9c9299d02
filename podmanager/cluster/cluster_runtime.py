"""One cluster as `up`, `down` and a run's supervisor drive it: its cloud backend, its Ray
side, its event log and lock, converging it to its spec, and replacing slices.

This is the supervisor's port (`supervision/ports.py::SupervisedCluster`) and nothing
more: the user's verbs are `api.Cluster`, which holds one of these. A run's supervisor
builds its own with `ClusterRuntime.from_name`, so no class travels through Ray.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Callable, ContextManager

from podmanager.cloud.base import DEAD_STATES, InProcessSimulator, Node, NodeState, Operation, SimulatedCloud, TpuCloud
from podmanager.cloud.retry import RetryingCloud
from podmanager.cluster.backends import local_machines, make_cloud
from podmanager.cluster.boot_watch import BootWatch, failed_boots
from podmanager.cluster.cloud_view import CloudWatcher
from podmanager.cluster.shared_listing import SharedZoneListing
from podmanager.cluster.spare_keeper import SpareKeeper
from podmanager.controller.cluster_hosts import ClusterHosts
from podmanager.core import catalog, paths, spares
from podmanager.core.clock import Clock, RealClock, poll_until
from podmanager.core.errors import ClusterNotFoundError, PodmanagerError, SpecError
from podmanager.core.records import HostSlot, SliceRef
from podmanager.core.spec import ClusterSpec, parse_spec
from podmanager.provisioning.loop import Provisioner
from podmanager.provisioning.plan import Observed, SliceChange, changes, describe_changes, desired_slices
from podmanager.state import Event, StateStore
from podmanager.state.lock import Holder, cluster_lock

EventCallback = Callable[[Event], None]
RECOVERY_LOCK_TIMEOUT_S = 1800.0  # a run's recovery waits this long for an `up` or `down` to finish


# Retries failing alike no further apart than this are one outage, recorded once (RetryingCloud
# gives a call a minute).
OUTAGE_GAP_S = 60.0


class MonitorRounds:
    """What the cluster's monitor runs each round besides probing the hosts: each job in turn,
    one's failure not keeping the next from its turn."""

    def __init__(self, *jobs: Callable[[], None]):
        self.jobs = jobs

    def __call__(self) -> None:
        failed: Exception | None = None
        for job in self.jobs:
            try:
                job()
            except Exception as error:  # noqa: BLE001 - raised after the others ran (the monitor logs it)
                failed = failed or error
        if failed is not None:
            raise failed


class ClusterRuntime:
    def __init__(self, spec: ClusterSpec, *, store: StateStore, clock: Clock | None = None,
                 cloud: TpuCloud | None = None, simulator: InProcessSimulator | None = None,
                 run_id: str | None = None, on_event: EventCallback | None = None):
        """`cloud`: talk to this backend as it is; `simulator`: a simulator a test drives
        in-process, with client-side retries; neither: the backend the spec asks for (a dry
        run: the real client on the project's local emulator).
        `run_id`: the run this runtime acts for (its supervisor's), stamped on every event it
        records. `on_event` sees every event recorded through it."""
        self.spec = spec
        self.store = store
        self.clock = clock or RealClock()
        self.run_id = run_id
        self._cloud = cloud
        self._simulator: SimulatedCloud | None = simulator
        # Made here from the spec (`make_cloud`), so configured and closed here; a backend handed
        # in (a test's in-process simulator, a caller's client) keeps its own settings and channels.
        self._backend_from_spec = cloud is None and simulator is None
        if simulator is not None and cloud is None:
            self._cloud = RetryingCloud(simulator, clock=self.clock, on_retry=self._record_retry)
        self._listeners: list[EventCallback] = [on_event] if on_event else []
        self._hosts: ClusterHosts | None = None
        self._hosts_built = False
        self._listing: SharedZoneListing | None = None  # made when a supervisor first checks the cloud
        self._last_retry: tuple[str, float] | None = None  # (the error, when): see _record_retry

    @classmethod
    def from_name(cls, name: str, *, store: StateStore | None = None, run_id: str | None = None) -> ClusterRuntime:
        """The cluster as the last `up` stored it."""
        store = store or StateStore()
        record = store.get_cluster(name)
        if record is None:
            raise ClusterNotFoundError(f"cluster {name!r} is not in the state store (it was torn down)")
        return cls(parse_spec(record.spec, source=f"stored spec of {name}"), store=store, run_id=run_id)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def backend_from_spec(self) -> bool:
        """Whether the backend is the one the spec asks for (not one handed in by a caller or test)."""
        return self._backend_from_spec

    @property
    def cloud(self) -> TpuCloud:
        if self._cloud is None:
            self._cloud, self._simulator = make_cloud(self.spec, clock=self.clock, on_retry=self._record_retry)
        return self._cloud

    def zone_nodes(self, zone: str, slot: int) -> list[Node]:
        """The zone's nodes as listed in this health slot, shared by the cluster's supervisors."""
        if self._listing is None:
            self._listing = SharedZoneListing(self.cloud, paths.cluster_dir(self.name) / "listing")
        return self._listing.list_nodes(zone, slot)

    @property
    def simulator(self) -> SimulatedCloud:
        """The simulated cloud behind a dry-run cluster (its emulator's controls), for faults."""
        self.cloud  # opens the backend (and the simulator with it)
        if self._simulator is None:
            raise SpecError(f"--cluster: {self.name} runs on {self.spec.backend.value}; "
                            "'podmanager sim' only injects faults into dry-run clusters")
        return self._simulator

    @property
    def hosts(self) -> ClusterHosts | None:
        """The Ray side (head, host agents); None for a control-plane-only simulation."""
        if not self._hosts_built:
            self._hosts = ClusterHosts.for_spec(self.spec, local_machines(self.spec), secrets_host=self._secrets_host)
            self._hosts_built = True
        return self._hosts

    def _secrets_host(self) -> str | None:
        """Where the cluster's Secret Manager is: a dry run's emulator (opened on first need);
        None on Google Cloud (the client finds it, or TPU_EMULATOR_HOST)."""
        if not self.spec.simulated:
            return None
        self.cloud  # opens the backend (and the emulator's control with it)
        return getattr(self._simulator, "address", None)

    def close_cloud(self) -> None:
        """Close the channels to the cloud (made again on next use): before its emulator stops,
        so no open channel sees the server go away."""
        if not self._backend_from_spec:
            return
        for backend in (self._cloud, self._simulator):
            close = getattr(backend, "close", None)
            if close is not None:
                close()
        self._cloud, self._simulator = None, None

    # ------------------------------------------------------------------ events and the lock

    def record(self, kind: str, message: str, slice_index: int | None = None, **data: Any) -> Event:
        if self.run_id is not None:
            # What a run's supervisor causes through us (a slice replaced, a retried call)
            # belongs to that run: following it shows these, and no other run does.
            data.setdefault("run_id", self.run_id)
        event = self.store.add_event(self.name, kind, message, slice_index=slice_index, **data)
        self.notify(event)
        return event

    def notify(self, event: Event) -> None:
        """Hand an event (recorded here or read from the log) to everyone listening."""
        for listener in list(self._listeners):
            listener(event)

    @contextmanager
    def listening(self, on_event: EventCallback | None) -> Iterator[None]:
        """`on_event` sees every event recorded while the block runs."""
        if on_event is None:
            yield
            return
        self._listeners.append(on_event)
        try:
            yield
        finally:
            self._listeners.remove(on_event)

    def _record_retry(self, call: str, error: BaseException, attempt: int) -> None:
        """One event per outage: the retries of any call that fail alike, each within
        OUTAGE_GAP_S of the last, are one outage (a dead emulator wrote twelve alike events)."""
        now, what = self.clock.now(), f"{type(error).__name__}: {error}"
        last, self._last_retry = self._last_retry, (what, now)
        if last is not None and last[0] == what and now - last[1] < OUTAGE_GAP_S:
            return
        self.record("retry", f"{call} failed ({error}); retrying until the API answers", call=call)

    def lock(self, verb: str, timeout_s: float) -> ContextManager[None]:
        """The cluster's lock (state/lock.py), saying whom it waits for when it must."""

        def waiting(holder: Holder | None) -> None:
            who = holder.describe(self.name) if holder else f"another podmanager process working on {self.name}"
            self.record("waiting", f"waiting for {who}", holder_pid=holder.pid if holder else None,
                        holder_verb=holder.verb if holder else None)

        return cluster_lock(self.name, verb, timeout_s=timeout_s, on_wait=waiting)

    def _recovery_lock(self) -> ContextManager[None]:
        verb = f"recovery for run {self.run_id}" if self.run_id else "recovery"
        return self.lock(verb, RECOVERY_LOCK_TIMEOUT_S)

    # ------------------------------------------------------------------ converging

    def provisioner(self) -> Provisioner:
        poll = 0.05 if self.spec.simulated else 5.0
        return Provisioner(self.cloud, self.name, self.spec.zones, record=self.record, clock=self.clock,
                           poll_interval_s=poll)

    def observe(self) -> Observed:
        """The cluster's nodes and queued resources as the cloud has them now."""
        return self.provisioner().observe()

    def plan_changes(self) -> list[SliceChange]:
        """What converging to the spec would do to each slice now, and the READY slices whose
        hosts failed to boot replaced (their startup script runs only at boot)."""
        observed = self.observe()
        failed = failed_boots(self.cloud, observed.nodes) if self.hosts else {}
        return changes(desired_slices(self.spec), observed, failed)

    def bring_up(self, changes: list[SliceChange], timeout_s: float, *,
                 before_converge: Callable[[], None] | None = None) -> list[Node]:
        """Store the spec, record the plan (`changes`), start the head, converge the cloud to
        the spec and wait for every host's agent: `up`, and a recovery's heal. The caller
        holds the cluster's lock. `before_converge` runs once the plan is recorded."""
        self.store.save_cluster(self.name, self.spec.model_dump(mode="json"), self.spec.backend.value, "provisioning")
        self.record("up", f"{len(self.spec.slice_list())} slice(s) on {self.spec.backend.value} "
                    f"in {', '.join(self.spec.zones)}")
        cost = spares.describe_cost(self.spec)
        self.record("up_plan", f"plan for {self.name}: {describe_changes(changes)}" + (f"; {cost}" if cost else ""),
                    changes=[c.as_dict() for c in changes], spares=cost)
        if self.spec.simulated and self._backend_from_spec:
            simulation = self.spec.simulation
            self.simulator.configure_cluster(self.name, simulation.create_latency_s, simulation.delete_latency_s,
                                             simulation.vm_image, boot_delay_s=simulation.boot_delay_s)
        if before_converge is not None:
            before_converge()
        metadata = self._start_head() if self.hosts else {}
        failed = [c.slice_index for c in changes if c.failed_boot and c.slice_index is not None]
        if failed:
            self._delete_only(failed, timeout_s, reason="a host failed to boot; a new slice boots again")
        nodes = self._converge(desired_slices(self.spec, metadata), timeout_s)
        self.record("slices_ready", f"all {len(nodes)} slice(s) READY")
        self._refresh_metadata(nodes, metadata)
        if self.hosts:
            self._wait_for_hosts(nodes)
        self.store.set_cluster_status(self.name, "up")
        return nodes

    def refresh_spec(self) -> None:
        """Take the spec the last `up` stored. A run's supervisor holds the spec of when it
        started; its recovery must converge to the cluster as it is now, or it would
        re-create a slice an edited spec dropped (or delete one it added)."""
        record = self.store.get_cluster(self.name)
        if record is None or record.spec == self.spec.model_dump(mode="json"):
            return
        self.spec = parse_spec(record.spec, source=f"stored spec of {self.name}")
        self._hosts, self._hosts_built = None, False  # built from the old spec's slices

    def _start_head(self) -> dict[str, str]:
        """Start (or reuse) the Ray head, saying so first. A new one comes up while the slices
        are created (their hosts wait for it); `_wait_for_hosts` waits for it first."""
        assert self.hosts is not None
        running = self.spec.head.address or self.hosts.controller.head_address()
        self.record("head_starting", f"using the Ray head at {running}" if running
                    else "starting the Ray head (it comes up while the slices are made)")
        return self.hosts.start()

    def _refresh_metadata(self, nodes: list[Node], metadata: dict[str, str]) -> None:
        """Give slices made before this head (or this startup script) the metadata a new one
        gets: their VMs read the head's address from it on every join try, so they rejoin a
        restarted head without being re-created."""
        stale = [n for n in nodes if any(n.metadata.get(key) != value for key, value in metadata.items())]
        if not stale:
            return
        self.record("metadata_update", f"telling {len(stale)} slice(s) the current head and startup script: "
                    + ", ".join(n.name for n in stale))
        operations = [self.cloud.update_node_metadata(n.zone, n.name, {**n.metadata, **metadata}) for n in stale]
        def finished(name: str) -> Operation | None:
            polled = self.cloud.get_operation(name)
            return polled if polled.done else None

        poll = 0.05 if self.spec.simulated else 2.0
        for operation in operations:
            done = poll_until(lambda: finished(operation.name), timeout_s=300.0, interval_s=poll, clock=self.clock,
                              what=f"updating the metadata of the slices of {self.name}")
            if done.error is not None:
                raise done.error

    def _wait_for_hosts(self, nodes: list[Node]) -> None:
        """Wait until every host of these slices has a healthy agent, saying how many have."""
        assert self.hosts is not None
        if self.hosts.head_ready():
            self.record("head_ready", f"Ray head is up at {self.hosts.controller.head_address()}")
        expected = sum(len(node.endpoints) or catalog.lookup(node.accelerator_type).hosts for node in nodes)
        self.record("hosts_joining", f"waiting for {expected} host(s) to join Ray "
                    f"(up to {self.spec.head.join_timeout_s:.0f}s)", expected=expected)
        joined = self.hosts.wait(nodes, on_progress=lambda healthy, of: self.record(
            "hosts_joining", f"{healthy}/{of} host(s) joined Ray", joined=healthy, expected=of),
            check=BootWatch(self.cloud, nodes, self.record, self.clock, simulated=self.spec.simulated),
            watch=MonitorRounds(CloudWatcher(self.name, ClusterRuntime.from_name),
                                SpareKeeper(self.name, ClusterRuntime.from_name)))
        self.record("hosts_joined", f"{len(joined)} host(s) joined Ray, each with a healthy agent")

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
                    self.record("slices_kept", f"slice(s) {fresh} were created again since the incident; kept")
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

    def dropped_slices(self, indexes: list[int]) -> list[int]:
        """Those of these slices that the cluster's spec, as the last `up` stored it, no
        longer has."""
        self.refresh_spec()
        known = {s.index for s in self.spec.slice_list()}
        return sorted(i for i in indexes if i not in known)

    def close(self) -> None:
        """Disconnect from Ray (the cluster stays up)."""
        if self._hosts is not None:
            self._hosts.close()
