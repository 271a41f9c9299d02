"""Small typed records that cross layer boundaries: which host, which slice."""

from __future__ import annotations

from dataclasses import dataclass


def host_label(slice_index: int, worker_id: int) -> str:
    """How a host is named to the user everywhere: output prefixes, events, errors."""
    return f"slice-{slice_index}/host-{worker_id}"


@dataclass(frozen=True)
class HostSlot:
    """One host of one slice, as a run addresses it."""

    slice_index: int
    worker_id: int
    node_name: str
    ip: str
    chips: int
    accelerator: str

    @property
    def label(self) -> str:
        return host_label(self.slice_index, self.worker_id)


@dataclass(frozen=True)
class SliceRef:
    """Where one slice of a run lives now: its index, zone and node name."""

    index: int
    zone: str
    node_name: str


@dataclass(frozen=True)
class HostRef:
    """One host of one slice by its position only: whose output a line is."""

    slice_index: int
    worker_id: int

    @property
    def label(self) -> str:
        return host_label(self.slice_index, self.worker_id)


@dataclass(frozen=True)
class RayAccess:
    """How a Ray user reaches a cluster's head: `ray status`, `ray job submit`, `ray.init()`."""

    address: str  # "ip:port" of the head's GCS, what RAY_ADDRESS and ray.init take
    dashboard_url: str | None  # also the job submission API
    token_path: str
    env: dict[str, str]  # the exports that let Ray's own tools reach the cluster with its token
