"""The channel's `ControllerApi` on the controller: each request answered by this machine's API
(`Cluster.status`, `cluster_events`), converted to the channel's records."""

from __future__ import annotations

from podmanager.api.cluster import resolve_cluster
from podmanager.api.history import cluster_events
from podmanager.api.status import ClusterStatus
from podmanager.channel import records
from podmanager.state import Event, StateStore


class ControllerChannelApi:
    """What a client's verbs reach through the channel (`channel/server.py::ControllerApi`)."""

    def __init__(self, store: StateStore | None = None):
        self.store = store or StateStore()

    def status(self, cluster: str) -> records.StatusReply:
        with resolve_cluster(cluster, store=self.store) as found:
            return status_reply(found.status())

    def events(self, cluster: str, after_id: int) -> records.EventsReply:
        found = self.store.events(cluster, after_id=after_id)
        if not found and after_id == 0:
            cluster_events(cluster, store=self.store)  # a name that never had a cluster: its clear error
        return records.EventsReply(events=[event_record(e) for e in found])


def status_reply(status: ClusterStatus) -> records.StatusReply:
    ray = records.RayEndpoint(address=status.ray.address, dashboard_url=status.ray.dashboard_url) if status.ray else None
    return records.StatusReply(
        name=status.name, backend=status.backend, project=status.project,
        slices=[records.SliceState.model_validate(s.model_dump()) for s in status.slices],
        hosts=[records.HostState.model_validate(h.model_dump()) for h in status.hosts], ray=ray,
        hosts_observed_at=status.hosts_observed_at,
        services=[records.ServiceEndpointState.model_validate(s.model_dump()) for s in status.services],
        slices_observed_at=status.slices_observed_at, head_problem=status.head_problem)


def event_record(event: Event) -> records.EventRecord:
    return records.EventRecord(id=event.id, time=event.time, kind=event.kind, slice_index=event.slice_index,
                               message=event.message, data=event.data)
