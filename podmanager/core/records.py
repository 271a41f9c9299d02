"""Small typed records that cross layer boundaries: which host, which slice."""

from __future__ import annotations

from dataclasses import dataclass


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
        return f"slice-{self.slice_index}/host-{self.worker_id}"


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
        return f"slice-{self.slice_index}/host-{self.worker_id}"
