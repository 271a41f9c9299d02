"""What `up` does to the controller VM (`controller.local: false`), planned as it plans the
slices and said before it does it: create it, keep the one there, or change that one in place.

The controller keeps its state on its boot disk (its `PODMANAGER_HOME`, `/var/lib/podmanager`:
the state store with every run's record and the event log, the channel's key and certificate),
and that disk is deleted with the VM: a new VM would lose every run's record, and the runs,
whose supervisors run there. So a VM that differs from what `up` would make now is never
replaced; it is changed in place, its disk kept (`cloud/gcp/controller_vm.py::
change_controller_vm`):
- **upgrade**: it runs other software (podmanager, Python, Ray or JAX, as it reported them
  against what this machine would install): its startup script replaced and the VM reset
  (https://cloud.google.com/compute/docs/instances/reset-instance), so its boot installs the
  new software on the same disk;
- **resize**: another `controller.machine_type` (stopped, changed, started:
  https://cloud.google.com/compute/docs/instances/changing-machine-type-of-stopped-instance) or a
  larger `controller.disk_gb` (the disk grown, then the VM reset or started: the image's boot
  grows its file system to the disk, https://cloud.google.com/compute/docs/disks/resize-persistent-disk);
  new software, if it differs too, comes with that boot.
Refused, exit 2, before anything changes, naming the field: a smaller disk (Google shrinks no
disk) and another `controller.zone` (a VM cannot move to another zone in place; a snapshot of
its disk could, which podmanager does not make).

Where the issue was silent, chosen here:
- Runs and services going on are named in the plan and are not stopped, nor is `--force`
  asked: the reboot pauses them as a controller crash does, and their supervisors pick them up
  when the daemon starts again (the hosts' programs go on meanwhile). A controller that does not
  answer (stopped) has them named as not known.
- The software is judged by the versions the VM reported (`versions`), as the slices' hosts are
  (`cluster/software_drift.py`): a VM that reported none yet is not judged. `boot.packages` and
  the package index are not compared (the VM does not report them).
- A suspended VM is resumed first, then changed as a running one."""

from __future__ import annotations

from dataclasses import dataclass

from podmanager.cloud.instances import STOPPED, SUSPENDED, Instance
from podmanager.cloud.network import region_of
from podmanager.core.errors import SpecError
from podmanager.core.records import Versions
from podmanager.core.spec import ClusterSpec

CREATE, KEEP, UPGRADE, RESIZE = "create", "keep", "upgrade", "resize"


@dataclass(frozen=True)
class ControllerPlan:
    kind: str  # CREATE, KEEP, UPGRADE (new software: a reset) or RESIZE (machine type or disk; a reboot)
    vm: str
    machine_type: str  # what it will have
    disk_gb: int
    zone: str  # where it is (keep, upgrade, resize) or will be (create)
    status: str = ""  # what the API reports of the VM there
    note: str = ""  # create: why that zone, when it is not the slices' region's
    differs: tuple[str, ...] = ()  # upgrade, resize: what differs, one line each, starting with its field
    new_machine_type: str = ""  # resize: the machine type it is changed to ("": kept)
    new_disk_gb: int = 0  # resize: the size its disk grows to (0: kept)
    new_software: bool = False  # its startup script installs other software at the reboot
    going_on: tuple[str, ...] | None = ()  # runs and services going on there (None: not known)

    @property
    def in_place(self) -> bool:
        return self.kind in (UPGRADE, RESIZE)

    def describe(self) -> str:
        state = f", {self.status}" if self.status else ""
        note = f": {self.note}" if self.note else ""
        head = (f"{self.kind} the controller VM {self.vm} ({self.machine_type}, {self.disk_gb} GB, in "
                f"{self.zone}{state}){note}")
        if not self.in_place:
            return head
        return "\n  ".join([head + ", in place: its boot disk and the state on it are kept", *self.differs,
                            f"up will: {self.steps()}", self.pause()])

    def steps(self) -> str:
        """What `up` will do to the VM, in order, in words."""
        stopped = self.status == STOPPED
        steps = ["resume it"] if self.status == SUSPENDED else []
        steps.append("replace its startup script")
        if self.new_disk_gb:
            steps.append(f"grow its disk to {self.new_disk_gb} GB")
        if self.new_machine_type:
            steps.append(f"{'' if stopped else 'stop it, '}set its machine type to {self.new_machine_type}, start it")
        else:
            steps.append("start it" if stopped else "reset it")
        boot = "installs the new software and starts the controller again" if self.new_software else (
            "starts the controller again")
        return ", ".join(steps) + f"; its boot {boot}"

    def pause(self) -> str:
        if self.going_on is None:
            return "runs going on: not known (the controller does not answer); any pause for the reboot and resume"
        if not self.going_on:
            return "runs going on: none"
        return (f"runs going on, which pause for the reboot and resume after it: {', '.join(self.going_on)}")


def drift(spec: ClusterSpec, existing: Instance, running: Versions | None, wanted: Versions) -> list[str]:
    """What differs between the controller VM there and the one `up` would make now, one line
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
        out.append(f"{software_field(spec)}: the VM runs other software than up would install now "
                   f"({', '.join(d.replace(' -> ', ' there, ') + ' here' for d in differences)})")
    return out


def software_field(spec: ClusterSpec) -> str:
    return "boot.podmanager" if spec.boot.podmanager else "the podmanager (Python, Ray, JAX) running here"


def plan_controller(spec: ClusterSpec, vm: str, existing: Instance | None, running: Versions | None,
                    wanted: Versions, zone: str, going_on: tuple[str, ...] | None = ()) -> ControllerPlan:
    """Create the controller VM in `zone` (`cloud/gcp/controller_vm.py::choose_zone`), keep
    `existing`, or change it in place (the module's docstring); SpecError (exit 2) naming what
    cannot be changed in place. `going_on`: the runs and services going on there, as named."""
    controller = spec.controller
    if existing is None:
        slices_region = region_of((spec.zones or [zone])[0])
        note = "" if controller.zone or region_of(zone) == slices_region else (
            f"no zone of {slices_region} offers {controller.machine_type}; the nearest that does")
        return ControllerPlan(CREATE, vm, controller.machine_type, controller.disk_gb, zone, note=note)
    differs = drift(spec, existing, running, wanted)
    refused = [line for line in differs if line.startswith("controller.zone:")]
    if controller.disk_gb < existing.disk_gb:
        refused.append(f"controller.disk_gb: the VM's disk is {existing.disk_gb} GB, the spec asks for "
                       f"{controller.disk_gb}, and Google Cloud shrinks no disk")
    if refused:
        raise SpecError(
            f"up: the controller VM {vm} cannot be changed in place as the spec asks; nothing was changed:\n  "
            + "\n  ".join(refused),
            hint=f"Put the field back as the VM has it (a VM moves to no other zone, nor does a disk shrink, in "
                 f"place), or make the controller anew: 'podmanager down -c {spec.name}', then 'podmanager up' (a new "
                 "VM starts without the old one's runs and their records: they are on its boot disk, deleted with it).")
    kept = (existing.machine_type, existing.disk_gb, existing.zone, existing.status)
    if not differs:
        return ControllerPlan(KEEP, vm, *kept)
    new_machine_type = controller.machine_type if existing.machine_type != controller.machine_type else ""
    new_disk_gb = controller.disk_gb if existing.disk_gb != controller.disk_gb else 0
    new_software = any(line.startswith(software_field(spec)) for line in differs)
    kind = RESIZE if new_machine_type or new_disk_gb else UPGRADE
    return ControllerPlan(kind, vm, *kept, differs=tuple(differs), new_machine_type=new_machine_type,
                          new_disk_gb=new_disk_gb, new_software=new_software, going_on=going_on)
