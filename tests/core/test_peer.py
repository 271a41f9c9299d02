"""A dry run's servers admit only their owner (`core/peer.py`): the connecting process's user is
read from the kernel's socket table, and another local user gets a 403 / PERMISSION_DENIED that
says why, from each simulated VM's metadata server, the REST routes (the Ray token's secret) and
the gRPC API (Cloud TPU, Secret Manager, control), and a service's router. The other user is real: a system user made
here, whose client process drops to it after loading its modules (this venv is under root's
home, which other users cannot read) and only then connects."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pwd
import socket
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from google.cloud.tpu_v2.types import cloud_tpu

from podmanager.core import peer
from podmanager.core.clock import FakeClock
from podmanager.emulator import rest
from podmanager.emulator.metadata import MetadataServers
from podmanager.emulator.secret_manager import SecretManagerEmulator
from podmanager.emulator.sim.cloud import SimCloud
from podmanager.emulator.tpu_api import TpuEmulator
from podmanager.serving.router import Router, RouterConfig

# ---------------------------------------------------------------------- the socket table, read


def test_addresses_take_the_kernels_hex_form() -> None:
    little = sys.byteorder == "little"
    assert peer.proc_address("127.0.0.1", 8470) == [
        ("tcp", ("0100007F" if little else "7F000001") + ":2116"),
        ("tcp6", "0000000000000000" + ("FFFF0000" if little else "0000FFFF") + ("0100007F" if little else "7F000001")
         + ":2116"),
    ]
    assert peer.proc_address("::1", 1) == [("tcp6", "00000000" * 3 + ("01000000" if little else "00000001") + ":0001")]


@pytest.mark.skipif(not peer.PROC_NET.joinpath("tcp").exists(), reason="no /proc/net on this platform")
def test_the_uid_of_a_local_connection_is_found_and_an_unknown_port_is_refused() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server, socket.create_connection(server.getsockname()) as client:
        accepted, address = server.accept()
        with accepted:
            assert address == client.getsockname()
            assert peer.socket_uid(*address, server=server.getsockname()) == os.geteuid()  # asked by sock_diag
            assert peer._table_uid(*address, server=server.getsockname()) == os.geteuid()  # read from /proc/net
            assert peer._table_uid(*address) == os.geteuid()
            assert peer.refusal(*address, server=server.getsockname()) is None
            wrong_server = ("127.0.0.1", server.getsockname()[1] + 1)  # not this socket's remote end
            assert peer.socket_uid(*address, server=wrong_server) is None
    with socket.create_server(("127.0.0.1", 0)) as unused:
        free_port = unused.getsockname()[1]
    # a port nothing holds (the listener is closed): no process to admit
    assert "no process of this machine" in (peer.refusal("127.0.0.1", free_port) or "")


def test_grpc_peers_are_parsed() -> None:
    assert peer.grpc_peer("ipv4:127.0.0.1:5000") == ("127.0.0.1", 5000)
    assert peer.grpc_peer("ipv6:[::1]:5001") == ("::1", 5001)
    assert peer.grpc_peer("unix:/tmp/socket") is None
    assert peer.listening_address("127.0.0.1", 9) == ("127.0.0.1", 9)
    assert peer.listening_address("0.0.0.0", 9) is None


# ---------------------------------------------------------------------- another local user, refused


@pytest.fixture(scope="module")
def other_user() -> Iterator[pwd.struct_passwd]:
    """A system user made for this test, removed after it."""
    if os.geteuid() != 0:
        pytest.skip("making another local user needs root (useradd); run this module as root to check it")
    name = f"pmpeer{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], check=True)


# The client: its modules loaded first, then (when asked) it becomes the other user, as
# `setpriv --reuid --regid --clear-groups` would make it, and only then connects.
CLIENT = textwrap.dedent("""
    import encodings.idna, json, os, sys, urllib.error, urllib.request  # idna: imported on first connect
    import grpc

    asked = json.loads(sys.argv[1])
    channel = grpc.insecure_channel(asked["grpc"])  # made now (it loads modules), connected at the first call
    calls = {method: channel.unary_unary(method) for method in asked["calls"]}
    if asked["uid"] is not None:
        os.setgroups([])
        os.setgid(asked["gid"])
        os.setuid(asked["uid"])
    answers = {"uid": os.geteuid()}
    for url in asked["http"]:
        request = urllib.request.Request(url, headers={"Metadata-Flavor": "Google", "Authorization": "Bearer x"})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                answers[url] = [response.status, response.read().decode()]
        except urllib.error.HTTPError as error:
            answers[url] = [error.code, error.read().decode()]
    for method, payload in asked["calls"].items():
        try:
            calls[method](bytes.fromhex(payload), timeout=10)
            answers[method] = ["OK", ""]
        except grpc.RpcError as error:
            answers[method] = [error.code().name, error.details()]
    channel.close()
    print(json.dumps(answers))
""")


@dataclass
class Servers:
    http: list[str]  # the metadata server's token, the REST route of the Ray token's secret
    grpc: str
    calls: dict[str, str]  # method -> its request, serialized (hex)


@contextlib.contextmanager
def router() -> Iterator[int]:
    """A service's router on its own event loop; its public port."""
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    made = asyncio.run_coroutine_threadsafe(_start_router(), loop).result(30)
    try:
        yield made[1]
    finally:
        asyncio.run_coroutine_threadsafe(made[0].stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)


async def _start_router() -> tuple[Router, int]:
    served = Router(RouterConfig(token="t", slices=(0,)))
    public, _ = await served.start("127.0.0.1", 0, "127.0.0.1", 0)
    return served, public


@pytest.fixture
def servers(tmp_path) -> Iterator[Servers]:
    sim = SimCloud("p", clock=FakeClock(), create_latency_s=0.0)
    emulator = TpuEmulator(sim, SecretManagerEmulator({"p": "123"}))
    grpc_server, grpc_port = emulator.serve()
    rest_server, rest_port = rest.serve([emulator.secrets.rest_access])
    metadata = MetadataServers(sim)
    metadata_port = metadata.start(zone="z", node="n", worker=0, accelerator="v4-8", endpoints=["127.0.0.1"],
                                   megascale_file=tmp_path / "megascale.json")
    serving = router()
    router_port = serving.__enter__()
    try:
        yield Servers(
            http=[f"http://127.0.0.1:{metadata_port}/computeMetadata/v1/instance/service-accounts/default/token",
                  f"http://127.0.0.1:{rest_port}/v1/projects/p/secrets/s/versions/latest:access",
                  f"http://127.0.0.1:{router_port}/healthz"],
            grpc=f"127.0.0.1:{grpc_port}",
            calls={
                "/google.cloud.tpu.v2.Tpu/ListNodes":
                    cloud_tpu.ListNodesRequest.serialize(cloud_tpu.ListNodesRequest(parent="projects/p/locations/z")).hex(),
                "/google.cloud.secretmanager.v1.SecretManagerService/AccessSecretVersion": b"".hex(),
                "/podmanager.emulator.Control/Call": json.dumps({"method": "known_zones"}).encode().hex(),
            })
    finally:
        serving.__exit__(None, None, None)
        metadata.stop_all()
        rest_server.shutdown()
        rest_server.server_close()
        grpc_server.stop(grace=None).wait()


def ask(servers: Servers, user: pwd.struct_passwd | None) -> dict[str, list[str]]:
    asked = {"uid": user.pw_uid if user else None, "gid": user.pw_gid if user else None, "http": servers.http,
             "grpc": servers.grpc, "calls": servers.calls}
    done = subprocess.run([sys.executable, "-c", CLIENT, json.dumps(asked)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_another_local_user_is_refused_by_every_server_and_the_owner_is_not(servers: Servers, other_user) -> None:
    theirs = ask(servers, other_user)
    assert theirs.pop("uid") == other_user.pw_uid
    for what, (status, body) in theirs.items():
        assert status in (403, "PERMISSION_DENIED"), f"{what} admitted uid {other_user.pw_uid}: {status} {body}"
        assert f"uid {other_user.pw_uid}" in body and "admits only its owner" in body, body

    mine = ask(servers, None)
    assert mine.pop("uid") == os.geteuid()
    metadata_token, secret, healthz = servers.http
    assert mine[healthz][0] == 503  # admitted: the router itself answers (no replica is ready)
    assert mine[metadata_token][0] == 200 and "ya29.sim." in mine[metadata_token][1]
    assert mine[secret][0] == 404  # admitted: the service itself answers (no such secret)
    assert mine["/google.cloud.tpu.v2.Tpu/ListNodes"] == ["OK", ""]
    assert mine["/podmanager.emulator.Control/Call"] == ["OK", ""]
    assert mine["/google.cloud.secretmanager.v1.SecretManagerService/AccessSecretVersion"][0] != "PERMISSION_DENIED"
