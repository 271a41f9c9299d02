"""What `up` does to the controller VM (`controller.local: false`), planned as it plans the
slices and said before it does it: create it, or keep the one there. One that differs from what
`up` would make now (its machine type, disk or zone, or the software it reports against the
podmanager, Python, Ray and JAX this machine would install) is refused, exit 2, before anything
changes, naming each field and its fix.

Refused rather than replaced: the controller keeps its state on its boot disk (its
`PODMANAGER_HOME`, `/var/lib/podmanager`: the state store with every run's record and the event
log, the channel's key and certificate, the Ray head), and that disk is deleted with the VM, so
a new VM would lose every run's record, and the runs, whose supervisors run there. Nor upgraded
in place yet: another machine type needs the VM stopped (its runs with it), and new software
needs its startup script run again (a reset); neither call is made by podmanager yet."""

from __future__ import annotations

from dataclasses import dataclass

from podmanager.cloud.instances import Instance
from podmanager.cloud.network import region_of
from podmanager.controller.software import Versions
from podmanager.core.errors import SpecError
from podmanager.core.spec import ClusterSpec


@dataclass(frozen=True)
class ControllerPlan:
    kind: str  # "create" or "keep"
    vm: str
    machine_type: str
    disk_gb: int
    zone: str  # where it is (keep) or will be (create)
    status: str = ""  # keep: what the API reports
    note: str = ""  # create: why that zone, when it is not the slices' region's

    def describe(self) -> str:
        state = f", {self.status}" if self.status else ""
        note = f": {self.note}" if self.note else ""
        return (f"{self.kind} the controller VM {self.vm} ({self.machine_type}, {self.disk_gb} GB, in "
                f"{self.zone}{state}){note}")


def drift(spec: ClusterSpec, existing: Instance, running: Versions | None, wanted: Versions) -> list[str]:
    """What differs between the controller VM there and the one `up` would make, one line
    each, starting with the field that says so; [] when nothing does. `running`: the versions
    it reported (None: not reported yet, so not judged)."""
    controller = spec.controller
    out = []
    if existing.machine_type != controller.machine_type:
        out.append(f"controller.machine_type: the VM is {existing.machine_type}, the spec asks for "
                   f"{controller.machine_type}")
    if existing.disk_gb != controller.disk_gb:
        out.append(f"controller.disk_gb: the VM's disk is {existing.disk_gb} GB, the spec asks for {controller.disk_gb}")
    if controller.zone and existing.zone != controller.zone:
        out.append(f"controller.zone: the VM is in {existing.zone}, the spec asks for {controller.zone}")
    differences = wanted.differences(running) if running is not None else []
    if differences:
        source = "boot.podmanager" if spec.boot.podmanager else "the podmanager (Python, Ray, JAX) running here"
        out.append(f"{source}: the VM runs other software than up would install now "
                   f"({', '.join(d.replace(' -> ', ' there, ') + ' here' for d in differences)})")
    return out


def plan_controller(spec: ClusterSpec, vm: str, existing: Instance | None, running: Versions | None,
                    wanted: Versions, zone: str) -> ControllerPlan:
    """Create the controller VM in `zone` (`cloud/gcp/controller_vm.py::choose_zone`), or keep
    `existing`; SpecError (exit 2) naming what differs."""
    controller = spec.controller
    if existing is None:
        slices_region = region_of((spec.zones or [zone])[0])
        note = "" if controller.zone or region_of(zone) == slices_region else (
            f"no zone of {slices_region} offers {controller.machine_type}; the nearest that does")
        return ControllerPlan("create", vm, controller.machine_type, controller.disk_gb, zone, note=note)
    differs = drift(spec, existing, running, wanted)
    if differs:
        raise SpecError(
            f"up: the controller VM {vm} differs from what up would make now; nothing was changed:\n  "
            + "\n  ".join(differs),
            hint=f"Put the field back as the VM has it (or run up with the podmanager the VM runs), or make the "
                 f"controller anew: 'podmanager down -c {spec.name}', then 'podmanager up' (a new VM starts "
                 "without the old one's runs and their records: they are on its boot disk, deleted with it).")
    return ControllerPlan("keep", vm, existing.machine_type, existing.disk_gb, existing.zone, existing.status)
