"""What `status` shows: every slice of the spec as the cloud has it, and the hosts."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from podmanager.cluster import cloud_view
from podmanager.cluster.cluster_runtime import ClusterRuntime
from podmanager.controller.host_info import UNREACHABLE, HostInfo
from podmanager.core import catalog
from podmanager.core.errors import SpecError
from podmanager.core.records import RayAccess
from podmanager.provisioning.plan import desired_slices
from podmanager.state.run_records import RunStore
from podmanager.state.services import ServiceStore
from podmanager.vm.boot_status import BootStatus


class _Shown(BaseModel):
    model_config = ConfigDict(frozen=True)


class SliceStatus(_Shown):
    index: int
    name: str
    accelerator: str
    zone: str | None
    state: str  # the node's state, or MISSING
    hosts: int
    chips: int
    boot: list[str] = Field(default_factory=list)  # each worker's boot stage as it reported it ("" not yet)
    spare: bool = False  # a hot spare: kept ready for a run that loses a slice, never worked on


class HostStatus(HostInfo):
    """A host as `status` shows it: as last probed, with the boot stage and the software its VM reported."""

    boot: str = ""
    versions: dict[str, str] = Field(default_factory=dict)  # {"python": ..., "ray": ..., "jax": ..., "podmanager": ...}


class ServiceEndpoint(_Shown):
    service_id: str
    endpoint: str
    slices: list[int]


class ClusterStatus(_Shown):
    name: str
    backend: str
    project: str
    slices: list[SliceStatus]
    hosts: list[HostStatus] = Field(default_factory=list)
    ray: RayAccess | None = None  # where Ray users find the cluster (None before the head starts)
    hosts_observed_at: float | None = None  # unix time the hosts were probed (by the cluster's monitor, or now)
    services: list[ServiceEndpoint] = Field(default_factory=list)  # the services serving on it
    slices_observed_at: float | None = None  # unix time the cloud reported the slices (the monitor's view, or now)
    head_problem: str | None = None  # what keeps the Ray head from serving (None: live, or no head yet)

    def service(self, service_id: str) -> ServiceEndpoint:
        """The serving service `service_id` (as `--service` names it), or the error that says how
        to find the right id."""
        for service in self.services:
            if service.service_id == service_id:
                return service
        serving = ", ".join(s.service_id for s in self.services) or "none"
        raise SpecError(f"--service {service_id}: cluster {self.name} serves no such service (serving: {serving})",
                        hint=f"'podmanager runs -c {self.name}' lists its services.")


def cluster_status(runtime: ClusterRuntime) -> ClusterStatus:
    """Slices as the cloud reported them to the cluster's monitor a moment ago, after anything
    podmanager last changed (`slices_observed_at`), or as it reports them now when it has not;
    hosts as the monitor probed them (`hosts_observed_at`), or probed now."""
    spec = runtime.spec
    view = cloud_view.read_fresh(spec.name, simulated=spec.simulated,
                                 newer_than=runtime.store.last_event_time(spec.name))
    if view is None:
        view = cloud_view.observe(runtime)
    observed = {n.name: n for n in view.nodes}
    slices = []
    boots: dict[tuple[str, int], BootStatus] = {}
    hosts = runtime.hosts
    runs = RunStore(runtime.store.path)
    try:
        spare_slices = set(runs.spares(spec.name))
    finally:
        runs.close()
    for want in desired_slices(spec):
        node = observed.get(want.node_name)
        accelerator = catalog.lookup(want.request.accelerator_type)
        if node is not None:
            boots.update({(node.name, w): b for w, b in view.boots_of(node).items()})
        slices.append(SliceStatus(index=want.index, name=want.node_name, accelerator=accelerator.name,
                                  zone=node.zone if node else None, state=node.state.value if node else "MISSING",
                                  hosts=accelerator.hosts, chips=accelerator.chips,
                                  boot=[boots.get((want.node_name, w), BootStatus()).stage
                                        for w in range(accelerator.hosts)] if node else [],
                                  spare=want.index in spare_slices))
    observed_at, found = hosts.observed_hosts() if hosts else (None, [])
    # The monitor probes the hosts from the head: with the head down its last probe is no news.
    head_problem = hosts.head_problem() if hosts and found else None
    shown = []
    for host in found:
        boot = boots.get((host.node_name, host.worker_id), BootStatus())
        if head_problem is not None:
            host = host.model_copy(update={"healthy": False, "state": UNREACHABLE, "detail": head_problem})
        shown.append(HostStatus(**host.model_dump(), boot=boot.stage, versions=boot.versions_dict()))
    services = [ServiceEndpoint(service_id=s.service_id, endpoint=s.endpoint, slices=s.slices)
                for s in ServiceStore(runtime.store.path).serving(spec.name)]
    return ClusterStatus(name=spec.name, backend=spec.backend.value, project=spec.project or "", slices=slices,
                         hosts=shown, ray=hosts.ray_access() if hosts else None, hosts_observed_at=observed_at,
                         services=services, slices_observed_at=view.observed_at, head_problem=head_problem)
