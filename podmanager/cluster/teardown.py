"""Tearing a cluster down: everything labelled with it, in the cloud and on the Ray side —
also when its local state is lost and it can only be found by its label."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from podmanager.cloud.base import TpuCloud
from podmanager.cluster import backends, cloud_view
from podmanager.cluster.backends import local_machines, make_cloud, make_compute
from podmanager.cluster.cluster_runtime import ClusterRuntime
from podmanager.cluster.preflight import delete_cluster_rule
from podmanager.controller.cluster_hosts import ClusterHosts
from podmanager.core import paths
from podmanager.core.cadence import Cadence
from podmanager.core.clock import Clock
from podmanager.core.errors import SpecError
from podmanager.core.events import EventKind
from podmanager.core.spec import (
    SIMULATED_PROJECT,
    SIMULATED_ZONES,
    ClusterSpec,
    parse_spec,
)
from podmanager.provisioning.loop import Provisioner
from podmanager.state import StateStore
from podmanager.vm import procs

if TYPE_CHECKING:
    from podmanager.cloud.gcp.compute import ComputeNetworks


def teardown(spec: ClusterSpec, cloud: TpuCloud, store: StateStore, *,
             record: Callable[..., Any] | None = None, clock: Clock | None = None, timeout_s: float = 600.0,
             hosts: ClusterHosts | None = None, compute: ComputeNetworks | None = None) -> int:
    """Delete every node and queued resource labelled with the cluster, then (given `compute`,
    which it closes) the cluster's firewall rule; stop its Ray side (simulated hosts, agents,
    the head podmanager started) and any other local process of it, then forget it. Returns
    how many local processes no record named were stopped."""
    name, zones = spec.name, spec.zones
    record = record or (lambda kind, message, slice_index=None, **data: store.add_event(
        name, kind, message, slice_index=slice_index, **data))
    record(EventKind.DOWN, f"deleting everything labelled podmanager-cluster={name} in {', '.join(zones)}")
    poll = Cadence.for_spec(spec).converge_poll_s
    if hosts is not None:
        hosts.close()  # leave Ray before its hosts go, rather than watch them die
    Provisioner(cloud, name, zones, record=record, clock=clock, poll_interval_s=poll).converge(
        [], timeout_s, unwanted_reason="the cluster is being torn down")
    delete_cluster_rule(spec, compute, record)  # after its VMs: the rule is what let them reach each other
    if hosts is not None:
        hosts.stop()  # its monitor too, so nothing writes the slices' view any more
    cloud_view.remove(name)
    strays = procs.stop_cluster(name)
    if strays:
        record(EventKind.STRAYS_STOPPED, f"stopped {strays} local process(es) of {name} that no record named")
    store.delete_cluster(name)
    record(EventKind.CLUSTER_DELETED, f"cluster {name} is down; nothing of it is left in the cloud")
    return strays


def stop_idle_emulator(spec: ClusterSpec, record: Callable[..., Any]) -> None:
    """After `down` of a dry-run cluster (its channels closed): stop the project's emulator if
    that was its last cluster (the emulator holds nothing any more)."""
    if spec.simulated and backends.stop_emulator_if_idle(spec.project or ""):
        record(EventKind.EMULATOR_STOPPED, f"the local Cloud TPU emulator of {spec.project} stopped: it holds nothing")


@dataclass(frozen=True)
class LabelDownReport:
    """What `down_by_label` did: the projects it searched and those it deleted something in."""

    name: str
    searched: list[str]
    deleted_in: list[str]
    local_processes: int = 0  # processes of the cluster on this machine, found by their owner tag and stopped


def simulated_projects() -> list[str]:
    """Every simulated project that has a cloud on this machine: its saved state
    (sim/*.json in the simulated cloud's folder) or its running emulator (sim/emulators/*.json), which saves
    only after its first change."""
    saved = paths.sim_state_path(SIMULATED_PROJECT).parent
    return sorted({path.stem for folder in (saved, saved / "emulators") for path in folder.glob("*.json")})


def down_by_label(name: str, *, dry_run: bool, project: str | None = None, zones: list[str] | None = None,
                  store: StateStore | None = None, timeout_s: float = 600.0) -> LabelDownReport:
    """`down` for a cluster whose local state is gone: find its resources by label and delete them,
    and its processes on this machine by their owner tag (`procs.owner`) and stop them.

    On the simulated cloud without a project, every simulated project is searched; on
    Google Cloud the project is required and only the given zones are searched."""
    store = store or StateStore()
    if not dry_run and not project:
        raise SpecError("--project: a cluster on Google Cloud whose local state is lost is found by label in "
                        "its project; pass --project PROJECT --zone ZONE (or --dry-run for the simulated cloud)")
    projects = ([project] if project else simulated_projects()) if dry_run else [project]
    deleted_in = []
    local = 0
    for where in projects:
        # Only the name, project and zones matter to a teardown; the slice is a placeholder.
        spec = parse_spec({"name": name, "project": where, "zones": zones or (None if dry_run else []),
                           "slices": [{"accelerator": "v4-8"}]}, source="--project/--zone", dry_run=dry_run)
        cloud, simulated = make_cloud(spec)
        if simulated is not None and not zones:
            spec = spec.model_copy(update={"zones": simulated.known_zones() or list(SIMULATED_ZONES)})
        # One `up`, `down` or recovery of a name at a time, found by label or not: an `up`
        # of this name under way finishes before its slices are taken.
        with ClusterRuntime(spec, store=store, cloud=cloud).lock("down", timeout_s):
            found = Provisioner(cloud, name, spec.zones).observe()
            if found.nodes or found.queued:
                secrets_host = getattr(simulated, "address", None)
                local += teardown(spec, cloud, store, timeout_s=timeout_s,
                                  hosts=ClusterHosts(spec, local_machines(spec), lambda: secrets_host))
                deleted_in.append(where)
            delete_cluster_rule(spec, make_compute(spec), lambda kind, message, **data: store.add_event(
                name, kind, message, **data))
        for channel in (cloud, simulated):
            getattr(channel, "close", lambda: None)()
        stop_idle_emulator(spec, lambda kind, message, **data: store.add_event(name, kind, message, **data))
    # Its head and hosts may run with no cloud left to find them by (the state folder
    # and the simulated cloud in it deleted): the process table still knows them.
    local += procs.stop_cluster(name)
    return LabelDownReport(name, [p for p in projects if p], deleted_in, local)
