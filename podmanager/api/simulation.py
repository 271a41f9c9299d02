"""Fault injection for dry-run clusters: what `podmanager sim ...` and the spec's scripted
faults do, as functions. Every fault is one `core/faults.py` type; this module adds what
takes a cluster: finding a slice's node now, and (`cluster/hangs.py`, which a run's
supervisor arms too) the host agents a hang freezes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from podmanager.cluster.hangs import hang
from podmanager.core.errors import SpecError
from podmanager.core.events import EventKind
from podmanager.core.fault_text import parse_duration
from podmanager.core.records import host_label

if TYPE_CHECKING:  # core.faults loads pydantic, which the CLI does not load on start
    from podmanager.cluster.cluster_runtime import ClusterRuntime
    from podmanager.core.faults import FaultKind

__all__ = ["arm_scripted_faults", "controller_crash", "controller_stop", "hang", "head_crash", "inject", "parse_duration", "preempt"]


def inject(cluster: "ClusterRuntime", fault: "FaultKind") -> str:
    """Inject one fault into a dry-run cluster now; what happened, for the user.

    A preemption without `after_s` takes the node that holds the slice now (the slice must
    exist); a hang freezes the program on its host now. Everything else goes to the cloud."""
    from podmanager.core.faults import (
        DegradeFault,
        HangFault,
        MaintenanceFault,
        PreemptFault,
    )

    if isinstance(fault, PreemptFault) and not fault.after_s:
        return f"preempting {preempt(cluster, fault.slice, fault.notice_s)}"
    if isinstance(fault, HangFault):
        if fault.after_s:
            raise SpecError(f"{fault.text()}: 'podmanager sim' freezes a program now; a hang after a delay "
                            "is scripted in the spec's simulation.faults (counted from a run's start)")
        hang(cluster, fault.slice, fault.worker)
        return f"froze the workload on {host_label(fault.slice, fault.worker)}"
    fault.apply(cluster.simulator, cluster=cluster.name)
    cluster.record(EventKind.FAULT_INJECTED, f"simulated fault: {fault.describe()}",
                   fault.slice if isinstance(fault, (PreemptFault, DegradeFault, MaintenanceFault)) else None)
    return fault.describe()


def preempt(cluster: "ClusterRuntime", slice_index: int, notice_s: float = 0.0) -> str:
    """Preempt the node that holds `slice_index` now, or after a notice; returns its name."""
    sim = cluster.simulator
    for node in cluster.observe().nodes:
        if node.slice_index == slice_index:
            sim.preempt(node.zone, node.name, notice_s=notice_s)
            cluster.record(EventKind.FAULT_INJECTED, f"simulated preemption of {node.name}"
                            + (f" with {notice_s:.0f}s notice" if notice_s else ""), slice_index)
            return node.name
    raise SpecError(f"--slice: cluster {cluster.name} has no node for slice {slice_index}")


def head_crash(cluster: "ClusterRuntime") -> str:
    """SIGKILL the Ray head's processes, as a crash of the machine that runs it: the hosts
    lose their head; `up` starts a new one and they rejoin it (no slice is re-created)."""
    from podmanager.controller import head
    from podmanager.vm import procs

    cluster.simulator  # dry-run clusters only
    state = head.load_state(cluster.name)
    if state is None or not state.started or not procs.kill(state.machine_id, wait_s=10.0):
        raise SpecError(f"--cluster: {cluster.name} has no running Ray head that podmanager started",
                        hint="Run 'podmanager up -f SPEC' first.")
    cluster.record(EventKind.FAULT_INJECTED, f"simulated crash of the Ray head at {state.address}")
    return f"killed the Ray head of {cluster.name} at {state.address}; 'podmanager up -f SPEC' starts a new one"


def controller_crash(cluster: "ClusterRuntime") -> str:
    """The cluster's controller VM crashed and booted again (`client/controller_faults.py`)."""
    from podmanager.client.controller_faults import crash_controller

    cluster.simulator  # dry-run clusters only; starts the project's emulator if it is not running
    return crash_controller(cluster.spec, cluster.record)


def controller_stop(cluster: "ClusterRuntime", *, suspend: bool = False) -> str:
    """The cluster's controller VM stopped or suspended (`client/controller_faults.py`)."""
    from podmanager.client.controller_faults import stop_controller

    cluster.simulator  # dry-run clusters only; starts the project's emulator if it is not running
    return stop_controller(cluster.spec, cluster.record, suspend=suspend)


def arm_scripted_faults(cluster: "ClusterRuntime") -> None:
    """The spec's scripted faults, counted from now (the first `up` of the cluster): each
    goes to the simulated cloud, except hangs, which `arm_hangs` times from a run's start."""
    from podmanager.core.faults import HangFault

    sim = cluster.simulator
    for fault in cluster.spec.simulation.faults:
        if not isinstance(fault, HangFault):
            fault.apply(sim, cluster=cluster.name)
        cluster.record(EventKind.FAULT_ARMED, f"simulated fault armed: {fault.text()} ({fault.describe()})")


def change_project(project: str, *, kind: str | None = None, grant: str | None = None, revoke: str | None = None,
                   member: str | None = None, enable: list[str] | None = None) -> dict[str, object]:
    """Change a dry run's simulated project as its console would: start it again as `kind`
    (no-organization, the default; new: a new project of a secure-by-default organization),
    grant or revoke `member` a role, enable APIs. Returns its IAM policy and enabled APIs."""
    from podmanager.cluster.backends import change_simulated_project

    if not project:
        raise SpecError("--project: the simulated project to change is needed", hint="Pass --project PROJECT.")
    if (grant or revoke) and not member:
        raise SpecError("--member: --grant and --revoke need the member", hint="e.g. --member user:owner@example.com.")
    if kind is not None and kind not in ("no-organization", "new"):
        raise SpecError(f"--kind {kind!r}: not a kind of simulated project", hint="Use no-organization or new.")
    try:
        return change_simulated_project(project, kind=kind, grant=grant, revoke=revoke, member=member,
                                        enable=list(enable or []))
    except Exception as error:  # the emulator's refusal of a role or a service (INVALID_ARGUMENT)
        details = getattr(error, "details", None)
        if callable(details):
            raise SpecError(f"sim project: {details()}") from None
        raise
