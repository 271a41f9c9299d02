"""Cloud Storage's download route as the emulator serves it to a simulated VM's startup script:
a dry run's staged wheel fetched the way it would be from Google, on the same port as Secret
Manager's REST route."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from podmanager.cloud.gcp import emulator_identity
from podmanager.controller.staging import stage_wheel
from podmanager.core import paths
from podmanager.core.spec import parse_spec
from podmanager.emulator import record as emulator_record
from podmanager.emulator import server
from podmanager.emulator.iam import tokens
from podmanager.emulator.server import Emulator
from podmanager.emulator.sim.cloud import SIMULATED_PROJECT_NUMBER

PROJECT = "podmanager-sim"
VM_ACCOUNT = f"{SIMULATED_PROJECT_NUMBER}-compute@developer.gserviceaccount.com"


def vm() -> dict[str, str]:
    """A VM's header: the token its metadata server hands out (the emulator issued it)."""
    return {"Authorization": f"Bearer {json.loads(tokens.metadata_token(VM_ACCOUNT))['access_token']}"}


def user() -> dict[str, str]:
    """The laptop user's header: the token of their simulated application default credentials."""
    return {"Authorization": f"Bearer {emulator_identity.token()}"}


@pytest.fixture
def emulator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An in-process emulator's REST root, http://127.0.0.1:PORT, over a fresh $PODMANAGER_HOME."""
    monkeypatch.setenv("PODMANAGER_HOME", str(tmp_path / "home"))
    running = Emulator(PROJECT, persist=False)
    try:
        yield f"http://127.0.0.1:{running.serve_rest()}"
    finally:
        running.stop()


def get(url: str, headers: dict[str, str]) -> tuple[int, bytes, str]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as answer:
            return answer.status, answer.read(), answer.headers["Content-Type"]
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read(), refused.headers["Content-Type"]


def download_url(root: str, gs_url: str) -> str:
    """The JSON API's download URL of gs://BUCKET/OBJECT, as a startup script builds it."""
    bucket, _, name = gs_url.removeprefix("gs://").partition("/")
    return f"{root}/storage/v1/b/{bucket}/o/{quote(name, safe='')}?alt=media"


def test_a_staged_wheel_downloads_by_the_json_apis_media_route(emulator: str, tmp_path: Path) -> None:
    wheel = tmp_path / "podmanager-0.1.0+h0123456789-py3-none-any.whl"
    wheel.write_bytes(b"PK\x03\x04 a wheel's bytes")
    staged = stage_wheel(parse_spec({"name": "demo", "backend": "simulated", "slices": [{"accelerator": "v4-8"}]}),
                         wheel)

    status, body, kind = get(download_url(emulator, staged), vm())

    assert (status, body, kind) == (200, wheel.read_bytes(), "application/octet-stream")


def test_without_a_bearer_token_it_is_401_and_a_missing_object_404(emulator: str) -> None:
    target = paths.storage_object("bucket", "boot/w.whl")
    target.parent.mkdir(parents=True)
    target.write_bytes(b"secret-ish")
    url = download_url(emulator, "gs://bucket/boot/w.whl")

    for headers in ({}, {"Authorization": "Basic dXNlcjpwdw=="}):
        status, body, _ = get(url, headers)
        assert (status, json.loads(body)["error"]["status"]) == (401, "UNAUTHENTICATED")
    status, body, _ = get(download_url(emulator, "gs://bucket/boot/other.whl"), vm())
    assert (status, json.loads(body)["error"]["message"]) == (404, "No such object: bucket/boot/other.whl")
    status, body, _ = get(download_url(emulator, "gs://elsewhere/boot/w.whl"), vm())
    assert status == 404


def test_it_serves_only_object_bytes_inside_the_buckets_folder(emulator: str) -> None:
    (paths.storage_dir() / "bucket").mkdir(parents=True)
    (paths.storage_dir().parent / "outside").write_text("not an object")  # what bucket/../../outside names
    status, body, _ = get(f"{emulator}/storage/v1/b/bucket/o/w.whl", vm())  # metadata, not bytes
    assert (status, json.loads(body)["error"]["message"]) == (
        400, "the emulator serves only an object's bytes: add ?alt=media")
    escape = f"{emulator}/storage/v1/b/bucket/o/{quote('../../outside', safe='')}?alt=media"
    status, body, _ = get(escape, vm())
    assert status == 400 and b"not an object" not in body
    status, _, _ = get(f"{emulator}/storage/v1/b/bucket/o?alt=media", vm())  # a listing: not served
    assert status == 404


def test_secret_managers_route_is_served_on_the_same_port(emulator: str) -> None:
    status, body, _ = get(f"{emulator}/v1/projects/p/secrets/none/versions/latest:access", user())
    assert (status, json.loads(body)["error"]["status"]) == (404, "NOT_FOUND")  # Secret Manager's own 404
    status, body, _ = get(f"{emulator}/nowhere", user())
    assert (status, json.loads(body)["error"]["message"]) == (404, "The requested URL /nowhere was not found on this server.")


def test_the_record_names_both_rest_roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PODMANAGER_HOME", str(tmp_path))
    server._write_record(PROJECT, "127.0.0.1:8470", "http://127.0.0.1:8471")
    found = emulator_record.read(PROJECT)
    assert found is not None
    assert (found.secrets_api, found.storage_api) == ("http://127.0.0.1:8471/v1", "http://127.0.0.1:8471")
