"""The Python API: one `Cluster` object with the verbs the CLI exposes.

    cluster = Cluster.from_yaml("infra/examples/v4-16.yaml", dry_run=True)
    cluster.up()
    print(cluster.status())
    cluster.down()
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from podmanager import catalog, paths
from podmanager.clock import Clock, RealClock
from podmanager.cloud.base import DEAD_STATES, Node, TpuCloud
from podmanager.cloud.factory import make_cloud, simulated_cloud, with_retries
from podmanager.cloud.sim import SimCloud
from podmanager.cluster_hosts import ClusterHosts
from podmanager.errors import ClusterNotFoundError, PodmanagerError, SpecError
from podmanager.provision import Provisioner
from podmanager.reconcile import desired_slices
from podmanager.spec import (
    SIMULATED_PROJECT,
    SIMULATED_ZONES,
    ClusterSpec,
    load_spec,
    parse_spec,
)
from podmanager.state import Event, StateStore
from podmanager.workload import Workload, check_parallelism

if TYPE_CHECKING:  # the run machinery imports Ray; only `run` needs it
    from podmanager.recovery_policy import RecoveryPolicy
    from podmanager.runs import OutputPrinter, RunResult

EventCallback = Callable[[Event], None]


@dataclass(frozen=True)
class SliceStatus:
    index: int
    name: str
    accelerator: str
    zone: str | None
    state: str  # the node's state, or MISSING
    hosts: int
    chips: int


@dataclass(frozen=True)
class ClusterStatus:
    name: str
    backend: str
    project: str
    slices: list[SliceStatus]
    hosts: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Cluster:
    """One cluster's lifecycle. Every verb is safe to repeat and to resume after a crash."""

    def __init__(self, spec: ClusterSpec, *, cloud: TpuCloud | None = None, store: StateStore | None = None,
                 clock: Clock | None = None, on_event: EventCallback | None = None):
        self.spec = spec
        self.clock = clock or RealClock()
        self.store = store or StateStore()
        self._cloud = cloud
        self.on_event = on_event
        self._hosts: ClusterHosts | None = None

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_yaml(cls, path: str | Path, *, dry_run: bool = False, **kwargs: Any) -> "Cluster":
        return cls(load_spec(path, dry_run=dry_run), **kwargs)

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, dry_run: bool = False, **kwargs: Any) -> "Cluster":
        return cls(parse_spec(data, dry_run=dry_run), **kwargs)

    @classmethod
    def from_name(cls, name: str, *, store: StateStore | None = None, **kwargs: Any) -> "Cluster":
        """The cluster that `up` recorded under this name."""
        store = store or StateStore()
        record = store.get_cluster(name)
        if record is None:
            known = ", ".join(r.name for r in store.list_clusters()) or "none"
            raise ClusterNotFoundError(
                f"--cluster: no cluster named {name!r} (known: {known})",
                hint="Create it with 'podmanager up -f SPEC', or pass -f SPEC to 'down' if its local state was lost.",
            )
        return cls(parse_spec(record.spec, source=f"stored spec of {name}"), store=store, **kwargs)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def cloud(self) -> TpuCloud:
        if self._cloud is None:
            self._cloud = make_cloud(self.spec, clock=self.clock, on_retry=self._record_retry)
        elif isinstance(self._cloud, SimCloud):  # given by a test or script: add the client-side retries
            self._cloud = with_retries(self._cloud, clock=self.clock, on_retry=self._record_retry)
        return self._cloud

    def _record(self, kind: str, message: str, slice_index: int | None = None, **data: Any) -> Event:
        event = self.store.add_event(self.name, kind, message, slice_index=slice_index, **data)
        if self.on_event:
            self.on_event(event)
        return event

    def _record_retry(self, call: str, error: BaseException, attempt: int) -> None:
        self._record("retry", f"{call} failed ({error}); retrying (attempt {attempt + 1})", call=call)

    @property
    def hosts_layer(self) -> ClusterHosts | None:
        """The Ray side (head, host agents); None for a control-plane-only simulation."""
        if self._hosts is None:
            self._hosts = ClusterHosts.for_spec(self.spec)
        return self._hosts

    def _provisioner(self) -> Provisioner:
        poll = 0.05 if self.spec.simulated else 5.0
        return Provisioner(self.cloud, self.name, self.spec.zones, record=self._record, clock=self.clock,
                           poll_interval_s=poll)

    # ------------------------------------------------------------------ verbs

    def up(self, *, timeout_s: float = 1800.0) -> ClusterStatus:
        """Create every slice of the spec and wait until all are READY. Resumes a partial `up`."""
        self.cloud  # opens the backend first: bad credentials fail before anything is recorded or created
        first_time = self.store.get_cluster(self.name) is None
        self.store.save_cluster(self.name, self.spec.model_dump(mode="json"), self.spec.backend.value, "provisioning")
        self._record("up", f"{len(self.spec.slice_list())} slice(s) on {self.spec.backend.value} "
                     f"in {', '.join(self.spec.zones)}")
        if first_time and self.spec.simulated:
            self._arm_scripted_faults()
        metadata = self.hosts_layer.start() if self.hosts_layer else {}
        nodes = self._converge(desired_slices(self.spec, metadata), timeout_s)
        self._record("slices_ready", f"all {len(nodes)} slice(s) READY")
        if self.hosts_layer:
            joined = self.hosts_layer.wait(nodes)
            self._record("hosts_joined", f"{len(joined)} host(s) joined Ray, each with a healthy agent")
        self.store.set_cluster_status(self.name, "up")
        return self.status()

    def _converge(self, desired: list[Any], timeout_s: float, reason: str = "not in the spec") -> list[Node]:
        nodes = self._provisioner().converge(desired, timeout_s, on_pass=self._remember_slices,
                                             unwanted_reason=reason)
        self._remember_nodes(nodes)
        return nodes

    def delete_dead_slices(self, timeout_s: float = 600.0) -> list[int]:
        """Delete preempted or terminated slices now (they hold quota) without replacing them."""
        dead = sorted(n.slice_index for n in self._provisioner().observe().nodes
                      if n.state in DEAD_STATES and n.slice_index is not None)
        if dead:
            desired = [d for d in desired_slices(self.spec) if d.index not in dead]
            self._converge(desired, timeout_s, reason="it is dead and holds quota; 'up' creates it again")
        return dead

    def replace_slices(self, indexes: list[int], *, reason: str, phases: dict[str, float] | None = None,
                       timeout_s: float = 1800.0) -> list[Node]:
        """Delete these slices at once, create them again (next zones on capacity errors),
        and wait for their hosts. `phases` receives the seconds each step took."""
        phases = {} if phases is None else phases
        metadata = self.hosts_layer.start() if self.hosts_layer else {}
        desired = desired_slices(self.spec, metadata)
        started = time.time()
        self._converge([d for d in desired if d.index not in indexes], timeout_s, reason=f"replacing it ({reason})")
        phases["delete"] = time.time() - started
        started = time.time()
        nodes = self._converge(desired, timeout_s)
        phases["create"] = time.time() - started
        if self.hosts_layer:
            started = time.time()
            self.hosts_layer.wait(nodes)
            phases["join"] = time.time() - started
        self._record("slices_replaced", f"slice(s) {indexes} replaced ({reason}) in "
                     + ", ".join(f"{k} {v:.1f}s" for k, v in phases.items()), slices=indexes, phases=phases)
        return nodes

    def status(self) -> ClusterStatus:
        observed = {n.name: n for n in self._provisioner().observe().nodes}
        slices = []
        for want in desired_slices(self.spec):
            node = observed.get(want.node_name)
            accelerator = catalog.lookup(want.request.accelerator_type)
            slices.append(SliceStatus(
                index=want.index,
                name=want.node_name,
                accelerator=accelerator.name,
                zone=node.zone if node else None,
                state=node.state.value if node else "MISSING",
                hosts=accelerator.hosts,
                chips=accelerator.chips,
            ))
        hosts = [asdict(h) for h in self.hosts_layer.hosts()] if self.hosts_layer else []
        return ClusterStatus(self.name, self.spec.backend.value, self.spec.project or "", slices, hosts)

    def down(self, *, timeout_s: float = 600.0) -> None:
        """Delete everything labelled with this cluster; safe to run twice."""
        teardown(self.name, self.cloud, self.spec.zones, self.store, record=self._record, clock=self.clock,
                 timeout_s=timeout_s, hosts=self.hosts_layer)

    def run(self, workload: Workload, *, printer: OutputPrinter | None = None,
            policy: RecoveryPolicy | None = None) -> RunResult:
        """Run the workload on every host of its slices, recovering from preemptions,
        failures and hangs within the spec's budgets."""
        if self.hosts_layer is None:
            raise SpecError("simulation.boot_hosts is false: this dry-run cluster has no hosts to run on")
        if workload.slices is not None:
            known = {s.index for s in self.spec.slice_list()}
            unknown = sorted(set(workload.slices) - known)
            if unknown:
                raise SpecError(f"--slices: {unknown} not in the cluster (slices {sorted(known)})")
        if workload.parallelism:
            indexes = workload.slices if workload.slices is not None else [s.index for s in self.spec.slice_list()]
            check_parallelism(workload.parallelism, sum(s.accelerator.chips for s in self.spec.slice_list()
                                                        if s.index in indexes))
        from podmanager import simulate
        from podmanager.recovery import RunSupervisor

        timers = simulate.arm_hangs(self) if self.spec.simulated else []
        try:
            return RunSupervisor(self, workload, printer=printer, policy=policy).run()
        finally:
            for timer in timers:
                timer.cancel()

    def hosts(self) -> list[Any]:
        return self.hosts_layer.hosts() if self.hosts_layer else []

    def agents(self, slice_indexes: list[int]) -> list[Any]:
        if self.hosts_layer is None:
            raise SpecError("simulation.boot_hosts is false: this dry-run cluster has no hosts")
        return self.hosts_layer.agents(slice_indexes)

    def dead_hosts(self) -> list[Any]:
        return self.hosts_layer.dead_hosts() if self.hosts_layer else []

    def slice_locations(self, slice_indexes: list[int]) -> list[tuple[int, str, str]]:
        """(index, zone, node name) of each of these slices as the cloud has them now."""
        nodes = {n.slice_index: n for n in self._provisioner().observe().nodes}
        missing = [i for i in slice_indexes if i not in nodes]
        if missing:
            raise PodmanagerError(f"slice(s) {missing} of {self.name} do not exist",
                                  hint="Run 'podmanager up' again to create them.")
        return [(i, nodes[i].zone, nodes[i].name) for i in slice_indexes]

    def run_dir(self, run_id: str) -> Path:
        return paths.cluster_dir(self.name) / "runs" / run_id

    def close(self) -> None:
        """Disconnect from Ray (the cluster stays up)."""
        if self._hosts is not None:
            self._hosts.close()

    def events(self, *, after_id: int = 0) -> list[Event]:
        return self.store.events(self.name, after_id=after_id)

    # ------------------------------------------------------------------ helpers

    def _remember_slices(self, observed: Any) -> None:
        self._remember_nodes(list(observed.nodes))

    def _remember_nodes(self, nodes: list[Node]) -> None:
        for node in nodes:
            if node.slice_index is not None:
                self.store.record_slice(self.name, node.slice_index, node.name, node.zone, node.accelerator_type,
                                        node.state.value)

    def _arm_scripted_faults(self) -> None:
        from podmanager.simulate import sim_of  # simulate builds on this module

        sim = sim_of(self)
        for fault in self.spec.simulation.faults:
            if fault.kind == "preempt":
                sim.preempt_slice_later(self.name, fault.slice, fault.after_s, fault.notice_s)
            elif fault.kind == "quota":
                sim.inject_quota(times=fault.times)
            elif fault.kind == "transient":
                sim.inject_transient(fault.times)
            elif fault.kind in ("capacity", "reservation", "preempt-while-creating"):
                sim.inject_create_fault(fault.zone, fault.kind, fault.times)
            self._record("fault_armed", f"simulated fault armed: {fault.model_dump(exclude_defaults=True)}")


def teardown(name: str, cloud: TpuCloud, zones: list[str], store: StateStore, *,
             record: Callable[..., Any] | None = None, clock: Clock | None = None, timeout_s: float = 600.0,
             hosts: ClusterHosts | None = None) -> None:
    """Delete every node and queued resource labelled with cluster `name`, stop its Ray side
    (simulated hosts, agents, the head podmanager started), then forget it."""
    record = record or (lambda kind, message, slice_index=None, **data: store.add_event(
        name, kind, message, slice_index=slice_index, **data))
    record("down", f"deleting everything labelled podmanager-cluster={name} in {', '.join(zones)}")
    poll = 0.05 if cloud.backend == "simulated" else 5.0
    if hosts is not None:
        hosts.close()  # leave Ray before its hosts go, rather than watch them die
    Provisioner(cloud, name, zones, record=record, clock=clock, poll_interval_s=poll).converge(
        [], timeout_s, unwanted_reason="the cluster is being torn down")
    if hosts is not None:
        hosts.stop()
    store.delete_cluster(name)
    record("cluster_deleted", f"cluster {name} is down; nothing of it is left in the cloud")


def down_by_label(name: str, *, dry_run: bool, project: str | None = None, zones: list[str] | None = None,
                  store: StateStore | None = None, timeout_s: float = 600.0) -> None:
    """`down` for a cluster whose local state is gone: find its resources by label."""
    store = store or StateStore()
    if dry_run:
        sim = simulated_cloud(project or SIMULATED_PROJECT)
        zones = zones or sim.known_zones() or list(SIMULATED_ZONES)
    # Only the name, project and zones matter to a teardown; the slice is a placeholder.
    spec = parse_spec({"name": name, "project": project, "zones": zones or [], "slices": [{"accelerator": "v4-8"}]},
                      source="--project/--zone", dry_run=dry_run)
    teardown(name, make_cloud(spec), spec.zones, store, timeout_s=timeout_s, hosts=ClusterHosts(spec))


def recovery_policy(spec: ClusterSpec, **overrides: int) -> "RecoveryPolicy":
    """The spec's recovery policy, with budgets overridden (e.g. from flags)."""
    from podmanager.recovery_policy import RecoveryPolicy

    return RecoveryPolicy.from_spec(spec.recovery.model_copy(update=overrides))


def resolve_cluster(name: str | None, *, store: StateStore | None = None) -> Cluster:
    """The named cluster, or the only one there is when no name is given."""
    store = store or StateStore()
    if name is None:
        known = store.list_clusters()
        if len(known) != 1:
            listing = ", ".join(r.name for r in known) or "none"
            raise ClusterNotFoundError(
                f"--cluster: {'no cluster exists' if not known else 'several clusters exist'} (known: {listing})",
                hint="Name one with -c NAME, or create one with 'podmanager up -f SPEC'.",
            )
        name = known[0].name
    return Cluster.from_name(name, store=store)
