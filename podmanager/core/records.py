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


@dataclass(frozen=True)
class Versions:
    """The versions one process runs (the controller's, or a VM's as it reports them); what
    `controller/software.py` pins, compared on the user's machine too (`client/controller_plan.py`)."""

    python: str  # in full: 3.11.7
    ray: str
    jax: str
    podmanager: str  # by content: 0.1.0+h0123456789

    def line(self) -> str:
        return f"python={self.python} ray={self.ray} jax={self.jax} podmanager={self.podmanager}"

    @classmethod
    def parse(cls, line: str) -> Versions | None:
        """From a `line()` as a host reports it; None if a name is missing (nothing to judge by)."""
        found = dict(part.split("=", 1) for part in line.split() if "=" in part)
        if not all(found.get(name) for name in ("python", "ray", "jax", "podmanager")):
            return None
        return cls(python=found["python"], ray=found["ray"], jax=found["jax"], podmanager=found["podmanager"])

    def differences(self, host: Versions) -> list[str]:
        """What a host running `host` lacks of these wanted versions, one 'NAME HOST'S -> WANTED'
        each, judged as the startup script judges an environment: a podmanager pinned by release
        (0.2.0) is any build of it, a built one (0.2.0+h...) is exactly its content."""
        out = [f"{name} {getattr(host, name)} -> {getattr(self, name)}" for name in ("python", "ray", "jax")
               if getattr(host, name) != getattr(self, name)]
        wanted, got = self.podmanager, host.podmanager
        if got != wanted and not ("+" not in wanted and got.startswith(wanted + "+h")):
            out.append(f"podmanager {got} -> {wanted}")
        return out
