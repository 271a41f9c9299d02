"""An error from the Cloud TPU API names the call that failed and what it was about
(`Cloud TPU API GetNode(projects/p/locations/z/nodes/x) failed: ...`), not only the API's
words (`Method not found! (UNIMPLEMENTED)`): against a real gRPC server that serves none of
the Tpu service's methods, and against the emulator refusing a request."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest

from podmanager.cloud import errors
from podmanager.cloud.gcp.client import GcpCloud
from podmanager.core.clock import FakeClock
from podmanager.emulator.sim.cloud import SimCloud
from podmanager.emulator.tpu_api import TpuEmulator


@pytest.fixture
def nothing_served() -> Iterator[str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(grace=None).wait()


def test_an_unimplemented_method_names_the_call(nothing_served: str) -> None:
    with GcpCloud("p", emulator_host=nothing_served, clock=FakeClock()) as cloud:
        with pytest.raises(errors.CloudError) as raised:
            cloud.get_node("z", "x")
        assert raised.value.message == (
            "Cloud TPU API GetNode(projects/p/locations/z/nodes/x) failed: Method not found! (UNIMPLEMENTED)")
        with pytest.raises(errors.CloudError, match=r"^Cloud TPU API ListNodes\(projects/p/locations/z\) failed: "):
            cloud.list_nodes("z")
        with pytest.raises(errors.CloudError, match=r"^Cloud TPU API GetOperation\(op-1\) failed: "):
            cloud.get_operation("op-1")


def test_a_refused_request_names_the_call_and_keeps_its_type() -> None:
    server, port = TpuEmulator(SimCloud("p", clock=FakeClock())).serve()
    try:
        with GcpCloud("p", emulator_host=f"127.0.0.1:{port}", clock=FakeClock()) as cloud:
            with pytest.raises(errors.NotFoundError) as raised:
                cloud.delete_node("z", "missing")
    finally:
        server.stop(grace=None).wait()
    assert raised.value.message.startswith("Cloud TPU API DeleteNode(projects/p/locations/z/nodes/missing) failed: ")
