"""What `status` shows: every slice of the spec as the cloud has it, and the hosts."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from podmanager.core import catalog
from podmanager.core.records import RayAccess
from podmanager.operations.cluster_runtime import ClusterRuntime
from podmanager.provisioning.plan import desired_slices


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
    ray: RayAccess | None = None  # where Ray users find the cluster (None before the head starts)
    hosts_observed_at: float | None = None  # unix time the hosts were probed (by the cluster's monitor, or now)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def cluster_status(runtime: ClusterRuntime) -> ClusterStatus:
    """Slices as the cloud reports them now; hosts as the cluster's monitor probed them a
    moment ago (`hosts_observed_at`), or probed now when it has not."""
    spec = runtime.spec
    observed = {n.name: n for n in runtime.observe().nodes}
    slices = []
    for want in desired_slices(spec):
        node = observed.get(want.node_name)
        accelerator = catalog.lookup(want.request.accelerator_type)
        slices.append(SliceStatus(index=want.index, name=want.node_name, accelerator=accelerator.name,
                                  zone=node.zone if node else None, state=node.state.value if node else "MISSING",
                                  hosts=accelerator.hosts, chips=accelerator.chips))
    hosts = runtime.hosts
    observed_at, found = hosts.observed_hosts() if hosts else (None, [])
    return ClusterStatus(spec.name, spec.backend.value, spec.project or "", slices, [asdict(h) for h in found],
                         hosts.ray_access() if hosts else None, observed_at)
