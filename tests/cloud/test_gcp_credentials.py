"""check_credentials: fail at once, with the command that fixes it, when there are no credentials."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from podmanager.cloud.errors import AuthenticationError
from podmanager.cloud.gcp import client as gcp
from podmanager.cloud.gcp.client import GcpCloud, check_credentials


@pytest.fixture
def no_adc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An environment with no Application Default Credentials and not on Google Cloud."""
    for name in ("GOOGLE_APPLICATION_CREDENTIALS", "CLOUDSDK_CONFIG", "GCE_METADATA_HOST", "GCE_METADATA_IP", "TPU_EMULATOR_HOST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(gcp, "_on_gce", lambda: False)  # hermetic even when CI runs on a GCE VM
    return tmp_path


def assert_says_how_to_authenticate(error: AuthenticationError) -> None:
    text = str(error)
    assert "gcloud auth application-default login" in text
    assert "--dry-run" in text and "TPU_EMULATOR_HOST" in text


def test_missing_credentials_file_fails_at_once(no_adc: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(no_adc / "nope.json"))
    started = time.monotonic()
    with pytest.raises(AuthenticationError) as raised:
        check_credentials("my-project")
    assert time.monotonic() - started < 1.0
    assert "nope.json" in str(raised.value)
    assert_says_how_to_authenticate(raised.value)


def test_no_adc_at_all_fails_at_once(no_adc: Path) -> None:
    started = time.monotonic()
    with pytest.raises(AuthenticationError) as raised:
        check_credentials("my-project")
    assert time.monotonic() - started < 1.0
    assert "my-project" in str(raised.value)
    assert_says_how_to_authenticate(raised.value)


def test_gcp_cloud_without_emulator_or_credentials_fails_at_once(no_adc: Path) -> None:
    started = time.monotonic()
    with pytest.raises(AuthenticationError):
        GcpCloud("my-project")
    assert time.monotonic() - started < 1.0


def test_unusable_credentials_file_says_so(no_adc: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = no_adc / "key.json"
    broken.write_text("{not json")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(broken))
    with pytest.raises(AuthenticationError, match="unusable") as raised:
        check_credentials("my-project")
    assert_says_how_to_authenticate(raised.value)


def test_gcloud_user_credentials_are_used_without_network(no_adc: Path) -> None:
    adc = no_adc / ".config" / "gcloud" / "application_default_credentials.json"
    adc.parent.mkdir(parents=True)
    adc.write_text(json.dumps({"type": "authorized_user", "client_id": "id", "client_secret": "s", "refresh_token": "r"}))
    credentials = check_credentials("my-project")
    assert credentials is not None
    GcpCloud("my-project", credentials=credentials).close()  # constructing makes no call


def test_emulator_host_from_environment_needs_no_credentials(no_adc: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TPU_EMULATOR_HOST", "127.0.0.1:1")
    cloud = GcpCloud("my-project")
    assert cloud.emulator_host == "127.0.0.1:1"
    cloud.close()
