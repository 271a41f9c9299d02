"""Secret Manager as the emulator serves it, through the real clients only: the gRPC service on
the Cloud TPU emulator's port (what `TPU_EMULATOR_HOST` names), and the REST route a VM's
startup script reads the Ray token by."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import pytest
from google.api_core import exceptions as google_exceptions
from google.cloud.secretmanager_v1 import SecretManagerServiceClient
from google.cloud.secretmanager_v1.services.secret_manager_service.transports import (
    SecretManagerServiceGrpcTransport,
)
from google.cloud.secretmanager_v1.types import resources, service
from google.iam.v1 import policy_pb2

from podmanager.cloud.checksum import crc32c
from podmanager.cloud.gcp import emulator_identity
from podmanager.cloud.gcp.secrets import TokenSecrets
from podmanager.core.clock import FakeClock
from podmanager.emulator.iam import tokens
from podmanager.emulator.secret_manager import SecretManagerEmulator
from podmanager.emulator.sim.cloud import SimCloud
from podmanager.emulator.tpu_api import TpuEmulator

PROJECT = "my-project"
TOKEN = "tok-5e1d9a3c7b2f4e6a8c0d1b3f5a7c9e2d"
SECRET = f"projects/{PROJECT}/secrets/podmanager-demo-ray-token"
ACCESSOR = "roles/secretmanager.secretAccessor"


@dataclass
class Rig:
    emulator: TpuEmulator
    secrets: SecretManagerEmulator
    address: str
    client: SecretManagerServiceClient


@pytest.fixture
def rig() -> Iterator[Rig]:
    secrets = SecretManagerEmulator()
    emulator = TpuEmulator(SimCloud(PROJECT, clock=FakeClock()), secrets)
    server, port = emulator.serve()
    address = f"127.0.0.1:{port}"
    channel = grpc.insecure_channel(address)
    try:
        client = SecretManagerServiceClient(transport=SecretManagerServiceGrpcTransport(channel=channel))
        yield Rig(emulator, secrets, address, client)
    finally:
        channel.close()
        server.stop(grace=None).wait()


def create_secret(client: SecretManagerServiceClient, secret_id: str = "podmanager-demo-ray-token") -> str:
    created = client.create_secret(parent=f"projects/{PROJECT}", secret_id=secret_id, secret=resources.Secret(
        replication=resources.Replication(automatic=resources.Replication.Automatic())))
    return created.name


# ---------------------------------------------------------------------- the token, as up and down keep it


def test_token_secrets_finds_the_emulator_by_tpu_emulator_host(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TPU_EMULATOR_HOST", rig.address)
    with TokenSecrets(PROJECT, clock=FakeClock()) as secrets:  # no client, no credentials: the emulator's
        assert secrets.ensure("demo", TOKEN) == SECRET
        assert secrets.ensure("demo", TOKEN) == SECRET  # `up` again adds nothing

        read = rig.client.access_secret_version(name=f"{SECRET}/versions/latest")
        assert read.payload.data == TOKEN.encode()
        assert read.payload.data_crc32c == crc32c(TOKEN.encode())
        assert read.name == f"{SECRET}/versions/1"
        assert dict(rig.client.get_secret(name=SECRET).labels) == {"podmanager-cluster": "demo"}

        secrets.delete("demo")
        secrets.delete("demo")  # `down` twice

    with pytest.raises(google_exceptions.NotFound):
        rig.client.get_secret(name=SECRET)
    assert rig.secrets.secret_names() == []


def test_a_second_create_already_exists_and_a_missing_secret_is_not_found(rig: Rig) -> None:
    create_secret(rig.client)
    with pytest.raises(google_exceptions.AlreadyExists):
        create_secret(rig.client)
    with pytest.raises(google_exceptions.NotFound):
        rig.client.access_secret_version(name=f"{SECRET}/versions/latest")  # no version yet
    with pytest.raises(google_exceptions.NotFound):
        rig.client.add_secret_version(parent=f"projects/{PROJECT}/secrets/nothing",
                                      payload=resources.SecretPayload(data=b"x"))
    with pytest.raises(google_exceptions.NotFound):
        rig.client.delete_secret(name=f"projects/{PROJECT}/secrets/nothing")


def test_a_payload_whose_checksum_does_not_match_is_refused(rig: Rig) -> None:
    create_secret(rig.client)

    with pytest.raises(google_exceptions.InvalidArgument, match="Checksum mismatch"):
        rig.client.add_secret_version(parent=SECRET, payload=resources.SecretPayload(
            data=TOKEN.encode(), data_crc32c=crc32c(TOKEN.encode()) ^ 1))

    assert rig.secrets.versions(SECRET) == []
    added = rig.client.add_secret_version(parent=SECRET, payload=resources.SecretPayload(data=b"unchecked"))
    assert added.name == f"{SECRET}/versions/1" and not added.client_specified_payload_checksum


def test_versions_are_read_by_number_or_latest_and_a_disabled_one_is_refused(rig: Rig) -> None:
    create_secret(rig.client)
    for data in (b"first", b"second"):
        rig.client.add_secret_version(parent=SECRET,
                                      payload=resources.SecretPayload(data=data, data_crc32c=crc32c(data)))

    assert rig.client.access_secret_version(name=f"{SECRET}/versions/1").payload.data == b"first"
    assert rig.client.access_secret_version(name=f"{SECRET}/versions/latest").payload.data == b"second"
    with pytest.raises(google_exceptions.NotFound):
        rig.client.access_secret_version(name=f"{SECRET}/versions/3")

    rig.client.disable_secret_version(name=f"{SECRET}/versions/2")
    with pytest.raises(google_exceptions.FailedPrecondition):  # latest is the newest, whatever its state
        rig.client.access_secret_version(name=f"{SECRET}/versions/latest")


# ---------------------------------------------------------------------- IAM


def test_the_iam_policy_is_stored_and_returned(rig: Rig) -> None:
    create_secret(rig.client)
    member = "serviceAccount:tpu-vms@my-project.iam.gserviceaccount.com"
    first = rig.client.get_iam_policy(request={"resource": SECRET})
    assert list(first.bindings) == [] and first.etag

    written = rig.client.set_iam_policy(request={"resource": SECRET, "policy": policy_pb2.Policy(
        bindings=[policy_pb2.Binding(role=ACCESSOR, members=[member])], etag=first.etag)})

    read = rig.client.get_iam_policy(request={"resource": SECRET})
    assert [(b.role, list(b.members)) for b in read.bindings] == [(ACCESSOR, [member])]
    assert read == written and read.etag != first.etag
    with pytest.raises(google_exceptions.Aborted):  # a read-modify-write from the stale read
        rig.client.set_iam_policy(request={"resource": SECRET, "policy": policy_pb2.Policy(etag=first.etag)})
    with pytest.raises(google_exceptions.NotFound):
        rig.client.get_iam_policy(request={"resource": f"projects/{PROJECT}/secrets/nothing"})


def test_with_the_projects_number_the_names_it_returns_carry_it_as_googles_do() -> None:
    secrets = SecretManagerEmulator(project_numbers={PROJECT: "123456789012"})
    server, port = secrets.serve()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        client = SecretManagerServiceClient(transport=SecretManagerServiceGrpcTransport(channel=channel))
        numbered = "projects/123456789012/secrets/podmanager-demo-ray-token"

        assert create_secret(client) == numbered  # asked for by the project's id
        assert client.get_secret(name=SECRET).name == numbered == client.get_secret(name=numbered).name
        added = client.add_secret_version(parent=SECRET, payload=resources.SecretPayload(data=TOKEN.encode()))
        assert added.name == f"{numbered}/versions/1"
        assert client.access_secret_version(name=f"{numbered}/versions/latest").payload.data == TOKEN.encode()
        with pytest.raises(google_exceptions.AlreadyExists):
            client.create_secret(parent="projects/123456789012", secret_id="podmanager-demo-ray-token",
                                 secret=resources.Secret(replication=resources.Replication(
                                     automatic=resources.Replication.Automatic())))
        assert secrets.secret_names() == [numbered]
        client.delete_secret(name=SECRET)
        assert secrets.secret_names() == []
    finally:
        channel.close()
        server.stop(grace=None).wait()


# ---------------------------------------------------------------------- REST, as the startup script reads it


@pytest.fixture
def rest(rig: Rig) -> Iterator[str]:
    server, port = rig.secrets.serve_rest()
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.shutdown()
        server.server_close()


def get(url: str, headers: dict[str, str]) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as refused:
        return refused.code, json.load(refused)


def test_the_rest_access_route_serves_the_latest_version_to_a_bearer(rig: Rig, rest: str) -> None:
    with TokenSecrets(PROJECT, client=rig.client, clock=FakeClock()) as secrets:
        secrets.ensure("demo", TOKEN)
    url = f"{rest}/{SECRET}/versions/latest:access"  # the URL the startup script builds

    status, body = get(url, {"Authorization": "Bearer ya29.vm-token"})

    assert status == 200
    assert base64.b64decode(body["payload"]["data"]).decode() == TOKEN  # what the script decodes
    assert body["payload"]["dataCrc32c"] == str(crc32c(TOKEN.encode()))
    assert body["name"] == f"{SECRET}/versions/1"


def test_the_rest_route_refuses_a_request_without_a_bearer_token(rig: Rig, rest: str) -> None:
    create_secret(rig.client)
    rig.client.add_secret_version(parent=SECRET, payload=resources.SecretPayload(data=TOKEN.encode()))
    url = f"{rest}/{SECRET}/versions/latest:access"

    for headers in ({}, {"Authorization": "Basic dXNlcjpwdw=="}):
        status, body = get(url, headers)
        assert (status, body["error"]["status"]) == (401, "UNAUTHENTICATED")
        assert TOKEN not in json.dumps(body)
    nothing = f"{rest}/projects/{PROJECT}/secrets/nothing/versions/latest:access"
    status, body = get(nothing, {"Authorization": "Bearer t"})
    assert (status, body["error"]["status"]) == (404, "NOT_FOUND")


# ---------------------------------------------------------------------- the command


def test_the_emulator_command_serves_secret_manager_over_grpc_and_rest() -> None:
    process = subprocess.Popen([sys.executable, "-m", "podmanager", "emulator", "--port", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        address = rest = None
        assert process.stdout is not None
        for line in process.stdout:  # the REST line comes first, then the export
            if "PODMANAGER_SECRETS_API=" in line:
                rest = line.strip().split("=", 1)[1]
            if line.startswith("export TPU_EMULATOR_HOST="):
                address = line.strip().split("=", 1)[1]
                break
        assert address and rest, process.stderr.read() if process.stderr else ""
        with TokenSecrets(PROJECT, emulator_host=address, call_timeout_s=10) as secrets:
            secrets.ensure("demo", TOKEN)
        user = {"Authorization": f"Bearer {emulator_identity.token()}"}  # the emulator issued it (its IAM)
        status, body = get(f"{rest}/{SECRET}/versions/latest:access", user)
        assert status == 200 and base64.b64decode(body["payload"]["data"]).decode() == TOKEN
    finally:
        process.terminate()
        process.wait(timeout=20)


def test_a_vms_token_reads_the_secret_only_once_its_account_is_granted(rig: Rig, rest: str) -> None:
    """A simulated VM's metadata token stands for its service account; as on Google Cloud, the
    account reads the Ray token only after `up` granted it secretAccessor on the secret."""
    account = "123-compute@developer.gserviceaccount.com"
    vm_token = {"Authorization": f"Bearer {tokens.issue('serviceAccount:' + account)}"}
    with TokenSecrets(PROJECT, client=rig.client, clock=FakeClock()) as secrets:
        secrets.ensure("demo", TOKEN)
        url = f"{rest}/{SECRET}/versions/latest:access"
        status, body = get(url, vm_token)
        assert (status, body["error"]["status"]) == (403, "PERMISSION_DENIED")
        assert TOKEN not in json.dumps(body)
        assert get(url, {"Authorization": f"Bearer {tokens.issue('serviceAccount:other@p.iam.gserviceaccount.com')}"})[0] == 403

        secrets.grant_access("demo", account)

    status, body = get(url, vm_token)
    assert status == 200 and base64.b64decode(body["payload"]["data"]).decode() == TOKEN
    assert get(url, {"Authorization": f"Bearer {tokens.issue('serviceAccount:other@p.iam.gserviceaccount.com')}"})[0] == 403


def test_a_secret_denied_fault_refuses_the_next_reads_by_vms_and_nothing_else(rig: Rig, rest: str) -> None:
    """`secret-denied:TIMES` (an IAM deny policy, a grant not yet in effect): a granted VM is
    refused TIMES reads, then reads again; podmanager's own reads are never refused."""
    account = "123-compute@developer.gserviceaccount.com"
    vm_token = {"Authorization": f"Bearer {tokens.issue('serviceAccount:' + account)}"}
    with TokenSecrets(PROJECT, client=rig.client, clock=FakeClock()) as secrets:
        secrets.ensure("demo", TOKEN)
        secrets.grant_access("demo", account)
    url = f"{rest}/{SECRET}/versions/latest:access"
    rig.emulator.control("fault", spec="secret-denied:2")

    assert get(url, {"Authorization": "Bearer ya29.a-person"})[0] == 200  # not a VM: not counted
    for _ in range(2):
        status, body = get(url, vm_token)
        assert (status, body["error"]["status"]) == (403, "PERMISSION_DENIED") and TOKEN not in json.dumps(body)
    assert rig.emulator.sim.pending_faults().secret_denied == 0
    status, body = get(url, vm_token)
    assert status == 200 and base64.b64decode(body["payload"]["data"]).decode() == TOKEN

    rig.emulator.control("fault", spec="secret-denied:5")
    rig.emulator.control("fault", spec="clear")
    assert get(url, vm_token)[0] == 200


def test_a_persistent_emulators_secrets_survive_its_restart_owner_only(tmp_path):
    """The background emulator restarts from what it saved: a secret (a cluster's token) made
    before is still there after, as Secret Manager keeps it whatever happens to a client."""
    saved = tmp_path / "sim" / "p.secrets.json"
    first = SecretManagerEmulator(project_numbers={PROJECT: "123456789012"}, saved_at=saved)
    first.call("CreateSecret", first.create_secret, service.CreateSecretRequest(
        parent=f"projects/{PROJECT}", secret_id="tok",
        secret=resources.Secret(replication=resources.Replication(automatic=resources.Replication.Automatic()))))
    first.call("AddSecretVersion", first.add_secret_version, service.AddSecretVersionRequest(
        parent=f"projects/{PROJECT}/secrets/tok", payload=resources.SecretPayload(data=b"s3cret")))
    assert saved.stat().st_mode & 0o777 == 0o600
    again = SecretManagerEmulator(project_numbers={PROJECT: "123456789012"}, saved_at=saved)
    answer = again.call("AccessSecretVersion", again.access_secret_version, service.AccessSecretVersionRequest(
        name=f"projects/{PROJECT}/secrets/tok/versions/latest"))
    assert answer.payload.data == b"s3cret"
    first.call("DeleteSecret", first.delete_secret, service.DeleteSecretRequest(name=f"projects/{PROJECT}/secrets/tok"))
    assert SecretManagerEmulator(project_numbers={PROJECT: "123456789012"}, saved_at=saved).secret_names() == []
