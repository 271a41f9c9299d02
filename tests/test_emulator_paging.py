"""Lists are paged as the Cloud TPU API pages them: the emulator honours `page_size` (at most
`MAX_PAGE_SIZE`) and answers `next_page_token`; `GcpCloud` asks for pages and follows them, so
a zone of 1,100 slices (a reply of about 10 MB unpaged, over gRPC's 4 MB) is listed. A reply
too large for the client is an error that says so, not a rate limit retried for minutes."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import pytest
from google.api_core import exceptions as google_exceptions
from google.cloud.tpu_v2 import TpuClient
from google.cloud.tpu_v2.services.tpu.transports import TpuGrpcTransport
from google.cloud.tpu_v2.types import cloud_tpu

from podmanager.cloud import errors
from podmanager.cloud.base import CLUSTER_LABEL, NodeRequest
from podmanager.cloud.gcp.calls import call_google
from podmanager.cloud.gcp.client import GcpCloud
from podmanager.cloud.gcp.errors import map_call_error
from podmanager.core.clock import FakeClock
from podmanager.core.spec import Capacity
from podmanager.emulator.sim.cloud import SimCloud
from podmanager.emulator.tpu_api import MAX_PAGE_SIZE, TpuEmulator

ZONE = "us-central2-b"
PARENT = f"projects/p/locations/{ZONE}"
SCRIPT = "#!/bin/bash\n" + "# a startup script as long as podmanager's\n" * 220  # about 9.5 kB a node


@dataclass
class Rig:
    sim: SimCloud
    emulator: TpuEmulator
    address: str


@pytest.fixture
def rig() -> Iterator[Rig]:
    sim = SimCloud("p", clock=FakeClock(), create_latency_s=0.0)
    emulator = TpuEmulator(sim)
    server, port = emulator.serve()
    try:
        yield Rig(sim, emulator, f"127.0.0.1:{port}")
    finally:
        server.stop(grace=None).wait()


def make_nodes(sim: SimCloud, count: int, *, queued: bool = False) -> list[str]:
    names = [f"big-s{i:04d}" for i in range(count)]
    for name in names:
        request = NodeRequest("v4-8", "rt", Capacity.ON_DEMAND, labels={CLUSTER_LABEL: "big"},
                              metadata={"startup-script": SCRIPT})
        if queued:
            sim.create_queued_resource(ZONE, f"{name}-qr", name, request)
        else:
            sim.create_node(ZONE, name, request)
    return names


def raw_client(rig: Rig, **options: int) -> TpuClient:
    channel = grpc.insecure_channel(rig.address, options=list(options.items()))
    return TpuClient(transport=TpuGrpcTransport(channel=channel))


def test_the_emulator_answers_one_page_at_a_time_in_name_order(rig: Rig) -> None:
    names = make_nodes(rig.sim, 5)
    client = raw_client(rig)
    try:
        first = client.list_nodes(request=cloud_tpu.ListNodesRequest(parent=PARENT, page_size=2)).pages
        page = next(iter(first))
        assert [n.name.rsplit("/", 1)[1] for n in page.nodes] == names[:2] and page.next_page_token
        rig.sim.delete_node(ZONE, names[0])  # gone between pages: the next page still starts after names[1]
        rest = client.list_nodes(request=cloud_tpu.ListNodesRequest(parent=PARENT, page_size=2,
                                                                   page_token=page.next_page_token))
        assert [n.name.rsplit("/", 1)[1] for n in rest] == names[2:]
        with pytest.raises(google_exceptions.InvalidArgument, match="page_size"):
            client.list_nodes(request=cloud_tpu.ListNodesRequest(parent=PARENT, page_size=-1))
    finally:
        client.transport.close()


def test_an_unpaged_list_gets_at_most_the_largest_page(rig: Rig) -> None:
    make_nodes(rig.sim, MAX_PAGE_SIZE + 5)
    client = raw_client(rig)
    try:
        page = next(iter(client.list_nodes(request=cloud_tpu.ListNodesRequest(parent=PARENT)).pages))
        assert len(page.nodes) == MAX_PAGE_SIZE and page.next_page_token
    finally:
        client.transport.close()


def test_gcp_cloud_follows_every_page_of_nodes_and_queued_resources(rig: Rig) -> None:
    names = make_nodes(rig.sim, 7, queued=True)
    with GcpCloud("p", emulator_host=rig.address, clock=FakeClock(), list_page_size=3) as cloud:
        assert sorted(q.name for q in cloud.list_queued_resources(ZONE)) == [f"{n}-qr" for n in names]
        asked = rig.emulator.requests_of("ListQueuedResources")
        assert [r.page_size for r in asked] == [3, 3, 3] and [bool(r.page_token) for r in asked] == [False, True, True]


def test_a_zone_of_1100_slices_is_listed_whole(rig: Rig) -> None:
    """The trial's `down` of 1,100 slices: the unpaged reply was 10.9 MB and never arrived."""
    names = make_nodes(rig.sim, 1100)
    with GcpCloud("p", emulator_host=rig.address, clock=FakeClock(), retry_deadline_s=0) as cloud:
        assert sorted(n.name for n in cloud.list_nodes(ZONE)) == names
    assert len(rig.emulator.requests_of("ListNodes")) == 11


def test_a_reply_too_large_for_the_client_says_so_and_is_not_retried(rig: Rig) -> None:
    make_nodes(rig.sim, 3)
    client = raw_client(rig, **{"grpc.max_receive_message_length": 4096})  # one node is more
    try:
        with pytest.raises(google_exceptions.ResourceExhausted) as raised:
            client.list_nodes(request=cloud_tpu.ListNodesRequest(parent=PARENT))
    finally:
        client.transport.close()
    mapped = map_call_error(raised.value)
    assert not isinstance(mapped, errors.TransientError)
    assert "reply was too large" in str(mapped) and "rate limited" not in str(mapped)


def test_a_service_that_stays_unavailable_is_named_once() -> None:
    def unavailable(**_: object) -> None:
        raise google_exceptions.ServiceUnavailable("down")

    with pytest.raises(errors.TransientError) as raised:
        call_google("list nodes", unavailable, {}, service="the Cloud TPU API", clock=FakeClock(), call_timeout_s=1,
                    retry_deadline_s=2, retry_initial_s=1, retry_max_s=1, map_error=map_call_error)
    assert raised.value.hint.startswith("The Cloud TPU API is unavailable")
