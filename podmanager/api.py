"""The Python API: one `Cluster` object with the verbs the CLI exposes.

    cluster = Cluster.from_yaml("infra/examples/v4-16.yaml", dry_run=True)
    cluster.up()
    print(cluster.status())
    cluster.down()
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from podmanager import catalog
from podmanager.clock import Clock, RealClock
from podmanager.cloud.base import Node, TpuCloud
from podmanager.cloud.factory import make_cloud, simulated_cloud, with_retries
from podmanager.cloud.retry import RetryingCloud
from podmanager.cloud.sim import SimCloud
from podmanager.errors import ClusterNotFoundError
from podmanager.provision import Provisioner
from podmanager.reconcile import desired_slices
from podmanager.spec import SIMULATED_PROJECT, ClusterSpec, load_spec, parse_spec
from podmanager.state import Event, StateStore

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
        nodes = self._provisioner().converge(desired_slices(self.spec), timeout_s, on_pass=self._remember_slices)
        self._remember_nodes(nodes)
        self.store.set_cluster_status(self.name, "up")
        self._record("cluster_ready", f"all {len(nodes)} slice(s) READY")
        return self.status()

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
        return ClusterStatus(self.name, self.spec.backend.value, self.spec.project or "", slices)

    def down(self, *, timeout_s: float = 600.0) -> None:
        """Delete everything labelled with this cluster; safe to run twice."""
        teardown(self.name, self.cloud, self.spec.zones, self.store, record=self._record, clock=self.clock,
                 timeout_s=timeout_s)

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
        sim = self.cloud.inner if isinstance(self.cloud, RetryingCloud) else self.cloud
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
             record: Callable[..., Any] | None = None, clock: Clock | None = None, timeout_s: float = 600.0) -> None:
    """Delete every node and queued resource labelled with cluster `name`, then forget it."""
    record = record or (lambda kind, message, slice_index=None, **data: store.add_event(
        name, kind, message, slice_index=slice_index, **data))
    record("down", f"deleting everything labelled podmanager-cluster={name} in {', '.join(zones)}")
    poll = 0.05 if cloud.backend == "simulated" else 5.0
    Provisioner(cloud, name, zones, record=record, clock=clock, poll_interval_s=poll).converge(
        [], timeout_s, unwanted_reason="the cluster is being torn down")
    store.delete_cluster(name)
    record("cluster_deleted", f"cluster {name} is down; nothing of it is left in the cloud")


def down_by_label(name: str, *, dry_run: bool, project: str | None = None, zones: list[str] | None = None,
                  store: StateStore | None = None, timeout_s: float = 600.0) -> None:
    """`down` for a cluster whose local state is gone: find its resources by label."""
    store = store or StateStore()
    if dry_run:
        sim = simulated_cloud(project or SIMULATED_PROJECT)
        teardown(name, with_retries(sim), zones or sim.known_zones(), store, timeout_s=timeout_s)
        return
    spec = parse_spec({"name": name, "project": project, "zones": zones or [], "slices": [{"accelerator": "v4-8"}]},
                      source="--project/--zone")
    teardown(name, with_retries(make_cloud(spec)), spec.zones, store, timeout_s=timeout_s)


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
