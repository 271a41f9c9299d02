"""A service of a cluster whose controller is a VM, as the user's machine sees it: its summary
over the channel, and its endpoint reached through a forward (`client/forward.py`).

The router listens on the controller's loopback only, so nothing of it is open to the network;
`reachable` carries a local port of this machine to it while the block runs (`serve` while it
follows the service; `podmanager dashboard --service ID` later)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator

from podmanager.channel.service_summary import ReplicaState, ServiceSummary
from podmanager.client.channel_client import ChannelClient
from podmanager.client.forward import Forward
from podmanager.client.patience import patiently
from podmanager.client.service_wait import follow_summaries, wait_for_replicas


def reach(cluster: str, service_id: str) -> str:
    """How a user reaches a service from this machine, as a phrase: the router's own address is
    the controller's loopback, which no other machine can use."""
    return f"reach it with 'podmanager dashboard -c {cluster} --service {service_id}'"


def as_seen_here(service: ServiceSummary) -> ServiceSummary:
    """The controller's summary of a service with its endpoint as this machine reaches it."""
    return service.model_copy(update={"endpoint": reach(service.cluster, service.run_id)})


class RemoteServiceHandle:
    """`ServiceHandle` over the channel: summary, follow, wait until ready, and the endpoint."""

    def __init__(self, client: ChannelClient, cluster: str, service_id: str):
        # Its own connection: the handle outlives the `RemoteCluster` that made it (`serve`
        # closes the cluster, then follows the service).
        self.client = ChannelClient(client.credentials)
        self.cluster = cluster
        self.service_id = service_id
        self.endpoint: str | None = None  # this machine's forward, while `reachable` holds it open

    @property
    def reach(self) -> str:
        """How a user reaches the service from this machine, as a phrase."""
        return reach(self.cluster, self.service_id)

    def summary_record(self) -> ServiceSummary:
        return as_seen_here(patiently(lambda: self.client.service(self.cluster, self.service_id).service))

    def summary(self) -> dict[str, Any]:
        """As `ServiceHandle.summary` (what `podmanager runs --json` prints of a service)."""
        return self.summary_record().model_dump(mode="json")

    def follow(self, on_summary: Callable[[dict[str, Any]], None], *, every_s: float = 2.0) -> dict[str, Any]:
        return follow_summaries(self.summary, on_summary, every_s)

    def replicas(self) -> list[ReplicaState]:
        return self.summary_record().replicas

    def wait_ready(self, replicas: int | None = None, *, timeout_s: float = 300.0) -> list[ReplicaState]:
        """As `ServiceHandle.wait_ready`: until `replicas` (default all) are ready; a replica whose
        run ended ends the wait."""
        # All: every slice of the service, as its summary counts them, also those whose replica
        # run the controller has not listed yet.
        wanted = self.summary_record().slices if replicas is None else replicas
        return wait_for_replicas(self.service_id, self.replicas, wanted, timeout_s=timeout_s, interval_s=0.5)

    @contextmanager
    def reachable(self, *, port: int = 0) -> Iterator[str]:
        """A local port (0: any free one) carried to the service's router while the block runs;
        yields its URL."""
        with Forward(self.client.credentials, self.service_id, port=port) as forward:
            self.endpoint = f"http://127.0.0.1:{forward.port}"
            try:
                yield self.endpoint
            finally:
                self.endpoint = None
