"""What `status` shows, built on the controller: every slice of the spec as the cloud has it, and
the hosts (the records: `channel/cluster_status.py`, which both ends of the channel read)."""

from __future__ import annotations

from podmanager.channel.cluster_status import (
    ClusterStatus,
    HostStatus,
    ServiceEndpoint,
    SliceStatus,
)
from podmanager.cluster import cloud_view
from podmanager.cluster.cluster_runtime import ClusterRuntime
from podmanager.controller.host_info import UNREACHABLE
from podmanager.core import catalog
from podmanager.provisioning.plan import desired_slices
from podmanager.state.run_records import RunStore
from podmanager.state.services import ServiceStore
from podmanager.vm.boot_status import BootStatus


def cluster_status(runtime: ClusterRuntime) -> ClusterStatus:
    """Slices as the cloud reported them to the cluster's monitor a moment ago, after anything
    podmanager last changed (`slices_observed_at`), or as it reports them now when it has not;
    hosts as the monitor probed them (`hosts_observed_at`), or probed now."""
    spec = runtime.spec
    view = cloud_view.read_fresh(spec.name, simulated=spec.simulated,
                                 newer_than=runtime.store.last_event_time(spec.name))
    if view is None:
        view = cloud_view.observe(runtime)
    observed = {n.name: n for n in view.nodes}
    slices = []
    boots: dict[tuple[str, int], BootStatus] = {}
    hosts = runtime.hosts
    runs = RunStore(runtime.store.path)
    try:
        spare_slices = set(runs.spares(spec.name))
    finally:
        runs.close()
    for want in desired_slices(spec):
        node = observed.get(want.node_name)
        accelerator = catalog.lookup(want.request.accelerator_type)
        if node is not None:
            boots.update({(node.name, w): b for w, b in view.boots_of(node).items()})
        slices.append(SliceStatus(index=want.index, name=want.node_name, accelerator=accelerator.name,
                                  zone=node.zone if node else None, state=node.state.value if node else "MISSING",
                                  hosts=accelerator.hosts, chips=accelerator.chips,
                                  boot=[boots.get((want.node_name, w), BootStatus()).stage
                                        for w in range(accelerator.hosts)] if node else [],
                                  spare=want.index in spare_slices))
    observed_at, found = hosts.observed_hosts() if hosts else (None, [])
    # The monitor probes the hosts from the head: with the head down its last probe is no news.
    head_problem = hosts.head_problem() if hosts and found else None
    shown = []
    for host in found:
        boot = boots.get((host.node_name, host.worker_id), BootStatus())
        if head_problem is not None:
            host = host.model_copy(update={"healthy": False, "state": UNREACHABLE, "detail": head_problem})
        shown.append(HostStatus(**host.model_dump(), boot=boot.stage, versions=boot.versions_dict()))
    services = [ServiceEndpoint(service_id=s.service_id, endpoint=s.endpoint, slices=s.slices)
                for s in ServiceStore(runtime.store.path).serving(spec.name)]
    return ClusterStatus(name=spec.name, backend=spec.backend.value, project=spec.project or "", slices=slices,
                         hosts=shown, ray=hosts.ray_access() if hosts else None, hosts_observed_at=observed_at,
                         services=services, slices_observed_at=view.observed_at, head_problem=head_problem)
