"""api/channel_service.py: the controller answers the channel's requests with its own API, in the
channel's records, and a Ray address's token path or exports (the controller's files) never
cross. No Ray: status is converted from a `ClusterStatus` built here, events come from SQLite."""

from __future__ import annotations

import pytest

from podmanager.api.channel_service import ControllerChannelApi, status_reply
from podmanager.api.status import (
    ClusterStatus,
    HostStatus,
    ServiceEndpoint,
    SliceStatus,
)
from podmanager.channel import identity, pinned, records
from podmanager.channel.client import ChannelClient
from podmanager.channel.errors import RemoteError
from podmanager.channel.server import ChannelServer
from podmanager.controller.host_info import HEALTHY, HostInfo
from podmanager.core.errors import ClusterNotFoundError
from podmanager.core.events import EventKind
from podmanager.core.records import RayAccess
from podmanager.state import StateStore


def test_a_cluster_status_becomes_the_typed_reply_without_the_controllers_paths() -> None:
    host = HostInfo(slice_index=0, node_name="c1-s0", worker_id=0, ip="10.0.0.2", chips=4, healthy=True,
                    last_heartbeat=12.5, ray_node_id="n1", detail="ok", state=HEALTHY)
    status = ClusterStatus(
        name="c1", backend="simulated", project="demo",
        slices=[SliceStatus(index=0, name="c1-s0", accelerator="v4-8", zone="z", state="READY", hosts=1, chips=4,
                            boot=["joined"], spare=False)],
        hosts=[HostStatus(**host.model_dump(), boot="joined", versions={"ray": "2.50.0"})],
        ray=RayAccess("127.0.0.1:6379", "http://127.0.0.1:8265", "/home/u/.podmanager/clusters/c1/ray_token",
                      {"RAY_ADDRESS": "127.0.0.1:6379", "RAY_AUTH_TOKEN_PATH": "/home/u/.podmanager/clusters/c1/ray_token"}),
        hosts_observed_at=13.0, services=[ServiceEndpoint(service_id="svc-1", endpoint="http://127.0.0.1:9000", slices=[0])],
        slices_observed_at=14.0, head_problem="the head is restarting")

    reply = status_reply(status)

    assert reply.slices == [records.SliceState(index=0, name="c1-s0", accelerator="v4-8", zone="z", state="READY",
                                               hosts=1, chips=4, boot=["joined"])]
    assert reply.hosts[0].model_dump() == {**host.model_dump(), "boot": "joined", "versions": {"ray": "2.50.0"}}
    assert reply.ray == records.RayEndpoint(address="127.0.0.1:6379", dashboard_url="http://127.0.0.1:8265")
    assert reply.services[0].service_id == "svc-1" and reply.head_problem == "the head is restarting"
    assert (reply.hosts_observed_at, reply.slices_observed_at) == (13.0, 14.0)
    assert "ray_token" not in reply.model_dump_json()


def test_events_are_read_from_the_store_after_a_cursor_and_an_unknown_cluster_is_refused() -> None:
    store = StateStore()
    first = store.add_event("c1", EventKind.SLICE_CREATING, "created c1-s0", slice_index=0, zone="z")
    store.add_event("c1", EventKind.SLICE_READY, "c1-s0 is READY", slice_index=0)
    api = ControllerChannelApi(store)

    assert [(e.kind, e.data) for e in api.events("c1", 0).events] == [("slice_creating", {"zone": "z"}),
                                                                      ("slice_ready", {})]
    assert [e.kind for e in api.events("c1", first.id).events] == ["slice_ready"]
    with pytest.raises(ClusterNotFoundError, match="no cluster named 'nope'"):
        api.events("nope", 0)


def test_the_channel_serves_the_controllers_event_log() -> None:
    store = StateStore()
    store.add_event("c1", EventKind.SLICE_CREATING, "created c1-s0", slice_index=0)
    made = identity.load_or_create("c1", identity.controller_address(simulated=True))
    with ChannelServer(ControllerChannelApi(store), made) as server:
        credentials = pinned.install("c1", pinned.ControllerAddress(host=server.host, port=server.port),
                                     made.cert_pem(), made.token())
        with ChannelClient(credentials) as client:
            assert [e.message for e in client.events("c1").events] == ["created c1-s0"]
            with pytest.raises(RemoteError) as unknown:
                client.events("nope")
    assert unknown.value.exit_code == 2 and "no cluster named 'nope'" in unknown.value.message
