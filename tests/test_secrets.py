"""TokenSecrets — the real google-cloud-secret-manager client — against a fake Secret Manager.

The fake serves `google.cloud.secretmanager.v1.SecretManagerService` over real gRPC on
127.0.0.1 (the same technique as `cloud/sim/server.py::TpuEmulator`), keeps secrets and versions in
memory as the service does, and fails chosen calls with chosen status codes. A FakeClock
takes the retry backoff, so nothing waits.
"""

from __future__ import annotations

import logging
import re
import threading
import traceback
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import grpc
import pytest
from google.cloud.secretmanager_v1 import SecretManagerServiceClient
from google.cloud.secretmanager_v1.services.secret_manager_service.transports import (
    SecretManagerServiceGrpcTransport,
)
from google.cloud.secretmanager_v1.types import resources, service
from google.protobuf import empty_pb2

from podmanager.cloud import errors
from podmanager.cloud.gcp.secrets import TokenSecrets, crc32c
from podmanager.cloud.gcp.startup import token_secret_id
from podmanager.core.clock import FakeClock

SERVICE = "google.cloud.secretmanager.v1.SecretManagerService"
PROJECT = "my-project"
TOKEN = "tok-7f3a9c1e5b2d4f60a8e1c3b5d7f9a2c4"
OTHER_TOKEN = "tok-0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e"

_SECRET = re.compile(r"^projects/(?P<project>[^/]+)/secrets/(?P<id>[A-Za-z0-9_-]{1,255})$")
_VERSION = re.compile(r"^(?P<secret>projects/[^/]+/secrets/[^/]+)/versions/(?P<version>latest|\d+)$")


class _Abort(Exception):
    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class _Secret:
    message: resources.Secret
    versions: list[tuple[resources.SecretVersion, bytes]] = field(default_factory=list)


class FakeSecretManager:
    """An in-memory Secret Manager on the wire: the methods `TokenSecrets` uses, plus faults.

    `fail(method, code, message, times)` makes the next `times` calls of `method` fail with
    that status before reaching the store. Every request is recorded in `requests`.
    """

    def __init__(self) -> None:
        self.secrets: dict[str, _Secret] = {}
        self.requests: list[tuple[str, Any]] = []
        self._faults: dict[str, list[tuple[grpc.StatusCode, str]]] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ serving

    def serve(self) -> tuple[grpc.Server, int]:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="fake-secret-manager"))
        methods: dict[str, tuple[Callable[[Any], Any], Any, Callable[[Any], bytes]]] = {
            "CreateSecret": (self.create_secret, service.CreateSecretRequest, resources.Secret.serialize),
            "AddSecretVersion": (self.add_secret_version, service.AddSecretVersionRequest, resources.SecretVersion.serialize),
            "AccessSecretVersion": (
                self.access_secret_version, service.AccessSecretVersionRequest, service.AccessSecretVersionResponse.serialize,
            ),
            "DeleteSecret": (self.delete_secret, service.DeleteSecretRequest, empty_pb2.Empty.SerializeToString),
        }
        handlers = {
            name: grpc.unary_unary_rpc_method_handler(
                self._wrap(name, fn), request_deserializer=request_type.deserialize, response_serializer=serialize
            )
            for name, (fn, request_type, serialize) in methods.items()
        }
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        return server, port

    def _wrap(self, method: str, fn: Callable[[Any], Any]) -> Callable[[Any, grpc.ServicerContext], Any]:
        def handler(request: Any, context: grpc.ServicerContext) -> Any:
            with self._lock:
                self.requests.append((method, request))
                queued = self._faults.get(method)
                fault = queued.pop(0) if queued else None
                try:
                    if fault is not None:
                        raise _Abort(*fault)
                    return fn(request)
                except _Abort as rejected:
                    context.abort(rejected.code, rejected.message)

        return handler

    def fail(self, method: str, code: grpc.StatusCode, message: str, times: int = 1) -> None:
        with self._lock:
            self._faults.setdefault(method, []).extend([(code, message)] * times)

    def calls(self, method: str) -> int:
        with self._lock:
            return sum(1 for name, _ in self.requests if name == method)

    # ------------------------------------------------------------------ the API (called under the lock)

    def _secret(self, name: str) -> _Secret:
        if not _SECRET.match(name):
            raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed secret name {name!r}")
        if name not in self.secrets:
            raise _Abort(grpc.StatusCode.NOT_FOUND, f"Secret [{name}] not found or has no versions.")
        return self.secrets[name]

    def create_secret(self, request: service.CreateSecretRequest) -> resources.Secret:
        name = f"{request.parent}/secrets/{request.secret_id}"
        if not _SECRET.match(name):
            raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed parent or secret id: {name!r}")
        if "replication" not in request.secret:
            raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, "Secret.replication is required.")
        if name in self.secrets:
            raise _Abort(grpc.StatusCode.ALREADY_EXISTS, f"Secret [{name}] already exists.")
        secret = resources.Secret(request.secret)
        secret.name = name
        self.secrets[name] = _Secret(secret)
        return secret

    def add_secret_version(self, request: service.AddSecretVersionRequest) -> resources.SecretVersion:
        secret = self._secret(request.parent)
        payload = request.payload
        if not payload.data or len(payload.data) > 64 * 1024:
            raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, "payload.data must be 1 byte to 64 KiB")
        if "data_crc32c" in payload and payload.data_crc32c != crc32c(payload.data):
            raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, "Checksum mismatch for payload.data.")
        version = resources.SecretVersion(
            name=f"{request.parent}/versions/{len(secret.versions) + 1}", state=resources.SecretVersion.State.ENABLED
        )
        secret.versions.append((version, bytes(payload.data)))
        return version

    def access_secret_version(self, request: service.AccessSecretVersionRequest) -> service.AccessSecretVersionResponse:
        match = _VERSION.match(request.name)
        if not match:
            raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed version name {request.name!r}")
        secret = self._secret(match["secret"])
        if not secret.versions:
            raise _Abort(grpc.StatusCode.NOT_FOUND, f"Secret [{match['secret']}] not found or has no versions.")
        number = len(secret.versions) if match["version"] == "latest" else int(match["version"])
        if not 1 <= number <= len(secret.versions):
            raise _Abort(grpc.StatusCode.NOT_FOUND, f"Secret Version [{request.name}] not found.")
        version, data = secret.versions[number - 1]
        if version.state != resources.SecretVersion.State.ENABLED:
            raise _Abort(grpc.StatusCode.FAILED_PRECONDITION, f"Secret Version [{version.name}] is in {version.state.name} state.")
        return service.AccessSecretVersionResponse(
            name=version.name, payload=resources.SecretPayload(data=data, data_crc32c=crc32c(data))
        )

    def delete_secret(self, request: service.DeleteSecretRequest) -> empty_pb2.Empty:
        self._secret(request.name)
        del self.secrets[request.name]
        return empty_pb2.Empty()

    # ------------------------------------------------------------------ for assertions

    def payloads(self, name: str) -> list[bytes]:
        with self._lock:
            return [data for _, data in self.secrets[name].versions]

    def disable_latest(self, name: str) -> None:
        with self._lock:
            self.secrets[name].versions[-1][0].state = resources.SecretVersion.State.DISABLED


@dataclass
class Rig:
    clock: FakeClock
    fake: FakeSecretManager
    secrets: TokenSecrets
    retries: list[tuple[str, BaseException, int]]


@pytest.fixture
def rig() -> Iterator[Rig]:
    fake = FakeSecretManager()
    server, port = fake.serve()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    client = SecretManagerServiceClient(transport=SecretManagerServiceGrpcTransport(channel=channel))
    clock = FakeClock()
    retries: list[tuple[str, BaseException, int]] = []
    secrets = TokenSecrets(
        PROJECT, client=client, clock=clock, call_timeout_s=10.0, retry_deadline_s=60.0,
        on_retry=lambda what, error, attempt: retries.append((what, error, attempt)),
    )
    try:
        yield Rig(clock, fake, secrets, retries)
    finally:
        secrets.close()
        channel.close()
        server.stop(grace=None).wait()


SECRET_NAME = f"projects/{PROJECT}/secrets/podmanager-demo-ray-token"


def all_text(error: BaseException) -> str:
    """Everything a person could see of an error: str, repr and the formatted chain with hints."""
    parts = [str(error), repr(error), "".join(traceback.format_exception(error))]
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and not any(current is s for s in seen):
        seen.append(current)
        parts += [str(current), repr(current), str(getattr(current, "hint", ""))]
        current = current.__cause__ or current.__context__
    return "\n".join(parts)


# ---------------------------------------------------------------------- ensure


def test_ensure_creates_the_secret_and_its_first_version(rig: Rig) -> None:
    name = rig.secrets.ensure("demo", TOKEN)

    assert name == SECRET_NAME == rig.secrets.secret_name("demo")
    assert name.endswith("/" + token_secret_id("demo"))
    secret = rig.fake.secrets[name].message
    assert dict(secret.labels) == {"podmanager-cluster": "demo"}
    assert "automatic" in secret.replication
    assert rig.fake.payloads(name) == [TOKEN.encode()]
    added = [request for method, request in rig.fake.requests if method == "AddSecretVersion"]
    assert added[0].payload.data_crc32c == crc32c(TOKEN.encode())


def test_ensure_twice_with_the_same_token_adds_no_version(rig: Rig) -> None:
    rig.secrets.ensure("demo", TOKEN)
    assert rig.secrets.ensure("demo", TOKEN) == SECRET_NAME

    assert rig.fake.payloads(SECRET_NAME) == [TOKEN.encode()]
    assert rig.fake.calls("AddSecretVersion") == 1


def test_a_new_token_adds_a_version_that_becomes_latest(rig: Rig) -> None:
    rig.secrets.ensure("demo", TOKEN)
    rig.secrets.ensure("demo", OTHER_TOKEN)
    rig.secrets.ensure("demo", OTHER_TOKEN)

    assert rig.fake.payloads(SECRET_NAME) == [TOKEN.encode(), OTHER_TOKEN.encode()]


def test_a_disabled_latest_version_is_replaced(rig: Rig) -> None:
    rig.secrets.ensure("demo", TOKEN)
    rig.fake.disable_latest(SECRET_NAME)

    rig.secrets.ensure("demo", TOKEN)

    assert rig.fake.payloads(SECRET_NAME) == [TOKEN.encode(), TOKEN.encode()]
    assert rig.fake.secrets[SECRET_NAME].versions[-1][0].state == resources.SecretVersion.State.ENABLED


def test_an_existing_secret_without_versions_gets_one(rig: Rig) -> None:
    rig.fake.fail("AddSecretVersion", grpc.StatusCode.INTERNAL, "boom")  # up crashed between create and add
    with pytest.raises(errors.CloudError):
        rig.secrets.ensure("demo", TOKEN)
    assert rig.fake.payloads(SECRET_NAME) == []

    rig.secrets.ensure("demo", TOKEN)

    assert rig.fake.payloads(SECRET_NAME) == [TOKEN.encode()]


def test_clusters_have_separate_secrets(rig: Rig) -> None:
    rig.secrets.ensure("demo", TOKEN)
    rig.secrets.ensure("other", OTHER_TOKEN)
    rig.secrets.delete("demo")

    assert list(rig.fake.secrets) == [f"projects/{PROJECT}/secrets/podmanager-other-ray-token"]


def test_an_empty_token_is_refused_before_any_call(rig: Rig) -> None:
    with pytest.raises(ValueError):
        rig.secrets.ensure("demo", "")
    assert rig.fake.requests == []


# ---------------------------------------------------------------------- delete


def test_delete_removes_the_secret(rig: Rig) -> None:
    rig.secrets.ensure("demo", TOKEN)

    rig.secrets.delete("demo")

    assert rig.fake.secrets == {}


def test_delete_twice_and_delete_of_nothing_succeed(rig: Rig) -> None:
    rig.secrets.ensure("demo", TOKEN)
    rig.secrets.delete("demo")
    rig.secrets.delete("demo")
    rig.secrets.delete("never-made")

    assert rig.fake.calls("DeleteSecret") == 3


# ---------------------------------------------------------------------- retries


@pytest.mark.parametrize("code", [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED])
def test_transient_errors_are_retried_then_succeed(rig: Rig, code: grpc.StatusCode) -> None:
    rig.fake.fail("CreateSecret", code, "try again", times=2)
    rig.fake.fail("AccessSecretVersion", code, "try again", times=1)
    rig.fake.fail("AddSecretVersion", code, "try again", times=1)
    start = rig.clock.now()

    assert rig.secrets.ensure("demo", TOKEN) == SECRET_NAME

    assert rig.fake.payloads(SECRET_NAME) == [TOKEN.encode()]
    assert rig.fake.calls("CreateSecret") == 3
    assert [attempt for _, _, attempt in rig.retries] == [1, 2, 1, 1]
    assert all(isinstance(error, errors.TransientError) for _, error, _ in rig.retries)
    assert rig.clock.now() > start  # backed off on the fake clock
    assert all(TOKEN not in f"{what} {error}" for what, error, _ in rig.retries)


def test_delete_retries_transient_errors(rig: Rig) -> None:
    rig.secrets.ensure("demo", TOKEN)
    rig.fake.fail("DeleteSecret", grpc.StatusCode.UNAVAILABLE, "try again", times=3)

    rig.secrets.delete("demo")

    assert rig.fake.secrets == {}


def test_transient_errors_past_the_deadline_give_up(rig: Rig) -> None:
    rig.fake.fail("CreateSecret", grpc.StatusCode.UNAVAILABLE, "down", times=1000)
    start = rig.clock.now()

    with pytest.raises(errors.TransientError) as caught:
        rig.secrets.ensure("demo", TOKEN)

    assert "gave up at the 60s retry deadline" in str(caught.value)
    assert rig.clock.now() - start <= 60.0
    assert 2 <= rig.fake.calls("CreateSecret") < 1000
    assert TOKEN not in all_text(caught.value)


def test_errors_that_are_not_transient_are_not_retried(rig: Rig) -> None:
    rig.fake.fail("CreateSecret", grpc.StatusCode.INVALID_ARGUMENT, "bad label")

    with pytest.raises(errors.InvalidRequestError, match="create secret .*bad label"):
        rig.secrets.ensure("demo", TOKEN)

    assert rig.fake.calls("CreateSecret") == 1


# ---------------------------------------------------------------------- permissions and the token's secrecy


@pytest.mark.parametrize("method", ["CreateSecret", "AccessSecretVersion", "AddSecretVersion"])
def test_permission_denied_names_the_roles_and_the_api(rig: Rig, method: str) -> None:
    rig.fake.fail(method, grpc.StatusCode.PERMISSION_DENIED, "Permission 'secretmanager.secrets.create' denied")

    with pytest.raises(errors.PermissionDeniedError) as caught:
        rig.secrets.ensure("demo", TOKEN)

    text = str(caught.value)
    assert "roles/secretmanager.admin" in text
    assert "roles/secretmanager.secretAccessor" in text
    assert f"gcloud services enable secretmanager.googleapis.com --project {PROJECT}" in text
    assert "secretmanager.secrets.create" in text  # what the API said
    assert rig.fake.calls(method) == 1  # not retried
    assert TOKEN not in all_text(caught.value)


def test_permission_denied_on_delete(rig: Rig) -> None:
    rig.fake.fail("DeleteSecret", grpc.StatusCode.PERMISSION_DENIED, "denied")

    with pytest.raises(errors.PermissionDeniedError, match="roles/secretmanager.admin"):
        rig.secrets.delete("demo")


def test_a_server_echoing_the_token_does_not_leak_it(rig: Rig) -> None:
    rig.fake.fail("AddSecretVersion", grpc.StatusCode.INVALID_ARGUMENT, f"bad payload {TOKEN!r}")

    with pytest.raises(errors.InvalidRequestError) as caught:
        rig.secrets.ensure("demo", TOKEN)

    assert "<redacted>" in str(caught.value)
    assert TOKEN not in all_text(caught.value)
    assert caught.value.__cause__ is None and caught.value.__context__ is None


def test_a_server_echoing_the_token_in_transient_errors_does_not_leak_it(rig: Rig) -> None:
    rig.fake.fail("AddSecretVersion", grpc.StatusCode.UNAVAILABLE, f"payload {TOKEN} not stored", times=1000)

    with pytest.raises(errors.TransientError) as caught:
        rig.secrets.ensure("demo", TOKEN)

    assert TOKEN not in all_text(caught.value)
    assert rig.retries and all(TOKEN not in what + all_text(error) for what, error, _ in rig.retries)


def test_the_token_is_never_logged_nor_kept(rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    rig.fake.fail("CreateSecret", grpc.StatusCode.UNAVAILABLE, "try again")
    rig.secrets.ensure("demo", TOKEN)
    rig.secrets.ensure("demo", OTHER_TOKEN)

    assert TOKEN not in caplog.text and OTHER_TOKEN not in caplog.text
    assert TOKEN not in repr(vars(rig.secrets))


# ---------------------------------------------------------------------- the checksum


def test_crc32c_matches_the_castagnoli_check_value() -> None:
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"") == 0


# ---------------------------------------------------------------------- construction


def test_without_credentials_it_fails_at_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from podmanager.cloud.gcp import client as gcp

    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setattr(gcp, "_on_gce", lambda: False)

    with pytest.raises(errors.AuthenticationError, match="gcloud auth application-default login"):
        TokenSecrets(PROJECT)


def test_given_credentials_it_builds_its_own_client_and_closes_it() -> None:
    from google.auth.credentials import AnonymousCredentials

    with TokenSecrets(PROJECT, credentials=AnonymousCredentials()) as secrets:
        assert secrets.secret_name("demo") == SECRET_NAME
