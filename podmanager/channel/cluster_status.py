"""What `status` shows of a cluster, declared once: the controller builds it (`api/status.py`),
the channel carries it as it is, and the user's machine reads it (`client/remote.py`).

On the wire it is validated on both ends, and a reply gains fields with defaults, never loses
one (`records.py`). `ray` names the controller's own files (its token's path, the exports):
the controller sends it empty, and the user reaches the head through `dashboard --ray`."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from podmanager.controller.host_info import HostInfo
from podmanager.core.errors import SpecError
from podmanager.core.records import RayAccess


class _Shown(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")  # ignore: a newer controller may add fields


class SliceStatus(_Shown):
    """One slice of the spec as the cloud last reported it."""

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

    def for_the_wire(self) -> ClusterStatus:
        """As the controller sends it: without the head's access, which names its own files."""
        return self.model_copy(update={"ray": None})
