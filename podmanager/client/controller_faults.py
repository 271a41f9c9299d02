"""A dry run's controller VM crashed or stopped, as Compute Engine's own faults would come: from
outside the VM, through the simulated project's emulator (`sim controller-crash`, `sim
controller-stop`). Never through the controller's channel: these faults take it down."""

from __future__ import annotations

from typing import Callable

from podmanager.cluster.backends import crash_controller_vm, halt_controller_vm
from podmanager.core.errors import SpecError
from podmanager.core.events import EventKind
from podmanager.core.spec import ClusterSpec

Record = Callable[[EventKind, str], object]  # where the fault is said (the cluster's event log, or the user)


def dry_run_only(spec: ClusterSpec) -> None:
    if not spec.simulated:
        raise SpecError(f"--cluster: {spec.name} runs on {spec.backend.value}; "
                        "'podmanager sim' only injects faults into dry-run clusters")


def _no_vm(spec: ClusterSpec) -> SpecError:
    return SpecError(f"--cluster: {spec.name} has no controller VM running in its simulated project",
                     hint="Its controller is the machine running podmanager (controller.local), or its VM is "
                          "not up yet: 'podmanager status' shows it.")


def crash_controller(spec: ClusterSpec, record: Record) -> str:
    """SIGKILL every process of the cluster's controller VM, as a crash of that machine, and boot
    it again from its disk (as GCE's automatic restart does: the startup script runs again)."""
    dry_run_only(spec)
    name = crash_controller_vm(spec)
    if name is None:
        raise _no_vm(spec)
    record(EventKind.FAULT_INJECTED, f"simulated crash of the controller VM {name}")
    return f"killed the controller VM {name} of {spec.name}; it boots again from its disk"


def stop_controller(spec: ClusterSpec, record: Record, *, suspend: bool = False) -> str:
    """The cluster's controller VM stopped (TERMINATED) or suspended by Compute Engine, as a host
    error or a maintenance may: its processes end, its disk stays; `up` starts (resumes) it again."""
    dry_run_only(spec)
    state = "SUSPENDED" if suspend else "TERMINATED"
    name = halt_controller_vm(spec, state)
    if name is None:
        raise _no_vm(spec)
    record(EventKind.FAULT_INJECTED, f"simulated {'suspension' if suspend else 'stop'} of the controller "
                                     f"VM {name} ({state})")
    return f"the controller VM {name} of {spec.name} is {state}; 'podmanager up' starts it again"
