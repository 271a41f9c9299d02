"""TokenSecrets — the real google-cloud-secret-manager client — against the emulator's Secret Manager.

`emulator/secret_manager.py::SecretManagerEmulator` serves
`google.cloud.secretmanager.v1.SecretManagerService` over real gRPC on 127.0.0.1, keeps secrets
and versions in memory as the service does, and fails chosen calls with chosen status codes
(`fail_next`). A FakeClock takes the retry backoff, so nothing waits.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from google.cloud.secretmanager_v1 import SecretManagerServiceClient
from google.cloud.secretmanager_v1.services.secret_manager_service.transports import (
    SecretManagerServiceGrpcTransport,
)

from podmanager.cloud import errors
from podmanager.cloud.gcp.secrets import TokenSecrets, crc32c, token_secret_id
from podmanager.core.clock import FakeClock
from podmanager.emulator.secret_manager import SecretManagerEmulator

PROJECT = "my-project"
TOKEN = "tok-7f3a9c1e5b2d4f60a8e1c3b5d7f9a2c4"
OTHER_TOKEN = "tok-0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e"


@dataclass
class Rig:
    clock: FakeClock
    service: SecretManagerEmulator
    client: SecretManagerServiceClient
    secrets: TokenSecrets
    retries: list[tuple[str, BaseException, int]]

    def payloads(self, name: str) -> list[bytes]:
        return [version.data for version in self.service.versions(name)]

    def calls(self, method: str) -> int:
        return len(self.service.requests_of(method))


@pytest.fixture
def rig() -> Iterator[Rig]:
    service = SecretManagerEmulator()
    server, port = service.serve()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    client = SecretManagerServiceClient(transport=SecretManagerServiceGrpcTransport(channel=channel))
    clock = FakeClock()
    retries: list[tuple[str, BaseException, int]] = []
    secrets = TokenSecrets(
        PROJECT, client=client, clock=clock, call_timeout_s=10.0, retry_deadline_s=60.0,
        on_retry=lambda what, error, attempt: retries.append((what, error, attempt)),
    )
    try:
        yield Rig(clock, service, client, secrets, retries)
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
    secret = rig.service.secret(name)
    assert dict(secret.labels) == {"podmanager-cluster": "demo"}
    assert "automatic" in secret.replication
    assert rig.payloads(name) == [TOKEN.encode()]
    added = rig.service.requests_of("AddSecretVersion")
    assert added[0].payload.data_crc32c == crc32c(TOKEN.encode())


def test_ensure_twice_with_the_same_token_adds_no_version(rig: Rig) -> None:
    rig.secrets.ensure("demo", TOKEN)
    assert rig.secrets.ensure("demo", TOKEN) == SECRET_NAME

    assert rig.payloads(SECRET_NAME) == [TOKEN.encode()]
    assert rig.calls("AddSecretVersion") == 1


def test_a_new_token_adds_a_version_that_becomes_latest(rig: Rig) -> None:
    rig.secrets.ensure("demo", TOKEN)
    rig.secrets.ensure("demo", OTHER_TOKEN)
    rig.secrets.ensure("demo", OTHER_TOKEN)

    assert rig.payloads(SECRET_NAME) == [TOKEN.encode(), OTHER_TOKEN.encode()]


def test_a_disabled_latest_version_is_replaced(rig: Rig) -> None:
    rig.secrets.ensure("demo", TOKEN)
    rig.client.disable_secret_version(name=rig.service.versions(SECRET_NAME)[-1].name)

    rig.secrets.ensure("demo", TOKEN)

    assert rig.payloads(SECRET_NAME) == [TOKEN.encode(), TOKEN.encode()]
    assert rig.service.versions(SECRET_NAME)[-1].enabled


def test_a_secret_made_already_is_never_created_again(rig: Rig) -> None:
    # A controller VM's account may read and write the cluster's secret, not make secrets.
    rig.secrets.ensure("demo", TOKEN)
    rig.secrets.ensure("demo", OTHER_TOKEN)
    rig.secrets.ensure("demo", OTHER_TOKEN)

    assert rig.calls("CreateSecret") == 1
    assert rig.payloads(SECRET_NAME) == [TOKEN.encode(), OTHER_TOKEN.encode()]


def test_an_existing_secret_without_versions_gets_one(rig: Rig) -> None:
    rig.service.fail_next("AddSecretVersion", grpc.StatusCode.INTERNAL, "boom")  # up crashed between create and add
    with pytest.raises(errors.CloudError):
        rig.secrets.ensure("demo", TOKEN)
    assert rig.payloads(SECRET_NAME) == []

    rig.secrets.ensure("demo", TOKEN)

    assert rig.payloads(SECRET_NAME) == [TOKEN.encode()]


def test_clusters_have_separate_secrets(rig: Rig) -> None:
    rig.secrets.ensure("demo", TOKEN)
    rig.secrets.ensure("other", OTHER_TOKEN)
    rig.secrets.delete("demo")

    assert rig.service.secret_names() == [f"projects/{PROJECT}/secrets/podmanager-other-ray-token"]


def test_an_empty_token_is_refused_before_any_call(rig: Rig) -> None:
    with pytest.raises(ValueError):
        rig.secrets.ensure("demo", "")
    assert list(rig.service.requests) == []


# ---------------------------------------------------------------------- delete


def test_delete_removes_the_secret(rig: Rig) -> None:
    rig.secrets.ensure("demo", TOKEN)

    rig.secrets.delete("demo")

    assert rig.service.secret_names() == []


def test_delete_twice_and_delete_of_nothing_succeed(rig: Rig) -> None:
    rig.secrets.ensure("demo", TOKEN)
    rig.secrets.delete("demo")
    rig.secrets.delete("demo")
    rig.secrets.delete("never-made")

    assert rig.calls("DeleteSecret") == 3


# ---------------------------------------------------------------------- retries


@pytest.mark.parametrize("code", [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED])
def test_transient_errors_are_retried_then_succeed(rig: Rig, code: grpc.StatusCode) -> None:
    rig.service.fail_next("CreateSecret", code, "try again", times=2)
    rig.service.fail_next("AccessSecretVersion", code, "try again", times=1)
    rig.service.fail_next("AddSecretVersion", code, "try again", times=1)
    start = rig.clock.now()

    assert rig.secrets.ensure("demo", TOKEN) == SECRET_NAME

    assert rig.payloads(SECRET_NAME) == [TOKEN.encode()]
    assert rig.calls("CreateSecret") == 3
    assert [attempt for _, _, attempt in rig.retries] == [1, 1, 2, 1]  # latest read first, then create twice, add
    assert all(isinstance(error, errors.TransientError) for _, error, _ in rig.retries)
    assert rig.clock.now() > start  # backed off on the fake clock
    assert all(TOKEN not in f"{what} {error}" for what, error, _ in rig.retries)


def test_delete_retries_transient_errors(rig: Rig) -> None:
    rig.secrets.ensure("demo", TOKEN)
    rig.service.fail_next("DeleteSecret", grpc.StatusCode.UNAVAILABLE, "try again", times=3)

    rig.secrets.delete("demo")

    assert rig.service.secret_names() == []


def test_transient_errors_past_the_deadline_give_up(rig: Rig) -> None:
    rig.service.fail_next("CreateSecret", grpc.StatusCode.UNAVAILABLE, "down", times=1000)
    start = rig.clock.now()

    with pytest.raises(errors.TransientError) as caught:
        rig.secrets.ensure("demo", TOKEN)

    assert "gave up at the 60s retry deadline" in str(caught.value)
    assert rig.clock.now() - start <= 60.0
    assert 2 <= rig.calls("CreateSecret") < 1000
    assert TOKEN not in all_text(caught.value)


def test_errors_that_are_not_transient_are_not_retried(rig: Rig) -> None:
    rig.service.fail_next("CreateSecret", grpc.StatusCode.INVALID_ARGUMENT, "bad label")

    with pytest.raises(errors.InvalidRequestError, match="create secret .*bad label"):
        rig.secrets.ensure("demo", TOKEN)

    assert rig.calls("CreateSecret") == 1


# ---------------------------------------------------------------------- permissions and the token's secrecy


@pytest.mark.parametrize("method", ["CreateSecret", "AccessSecretVersion", "AddSecretVersion"])
def test_permission_denied_names_the_roles_and_the_api(rig: Rig, method: str) -> None:
    rig.service.fail_next(method, grpc.StatusCode.PERMISSION_DENIED, "Permission 'secretmanager.secrets.create' denied")

    with pytest.raises(errors.PermissionDeniedError) as caught:
        rig.secrets.ensure("demo", TOKEN)

    text = str(caught.value)
    assert "roles/secretmanager.admin" in text
    assert "roles/secretmanager.secretAccessor" in text
    assert f"gcloud services enable secretmanager.googleapis.com --project {PROJECT}" in text
    assert "secretmanager.secrets.create" in text  # what the API said
    assert rig.calls(method) == 1  # not retried
    assert TOKEN not in all_text(caught.value)


def test_permission_denied_on_delete(rig: Rig) -> None:
    rig.service.fail_next("DeleteSecret", grpc.StatusCode.PERMISSION_DENIED, "denied")

    with pytest.raises(errors.PermissionDeniedError, match="roles/secretmanager.admin"):
        rig.secrets.delete("demo")


def test_a_server_echoing_the_token_does_not_leak_it(rig: Rig) -> None:
    rig.service.fail_next("AddSecretVersion", grpc.StatusCode.INVALID_ARGUMENT, f"bad payload {TOKEN!r}")

    with pytest.raises(errors.InvalidRequestError) as caught:
        rig.secrets.ensure("demo", TOKEN)

    assert "<redacted>" in str(caught.value)
    assert TOKEN not in all_text(caught.value)
    assert caught.value.__cause__ is None and caught.value.__context__ is None


def test_a_server_echoing_the_token_in_transient_errors_does_not_leak_it(rig: Rig) -> None:
    rig.service.fail_next("AddSecretVersion", grpc.StatusCode.UNAVAILABLE, f"payload {TOKEN} not stored", times=1000)

    with pytest.raises(errors.TransientError) as caught:
        rig.secrets.ensure("demo", TOKEN)

    assert TOKEN not in all_text(caught.value)
    assert rig.retries and all(TOKEN not in what + all_text(error) for what, error, _ in rig.retries)


def test_the_token_is_never_logged_nor_kept(rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    rig.service.fail_next("CreateSecret", grpc.StatusCode.UNAVAILABLE, "try again")
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
