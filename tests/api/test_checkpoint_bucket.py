"""A gs:// checkpoint dir's bucket is checked at submit, against a local GCS emulator: a
bucket that does not exist is bad input (nothing starts); one that cannot be asked about is
a warning, not a refusal (the hosts' service account may reach what this machine cannot)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from podmanager.api.submission import check_bucket
from podmanager.core.errors import SpecError

emulator_server = pytest.importorskip(
    "gcp_storage_emulator.server", reason="the GCS emulator is in the test extra: pip install -e '.[test]'")

BUCKET = "ckpt-bucket"


@pytest.fixture
def gcs(monkeypatch) -> Iterator[str]:
    """gcsfs in this process pointed at an in-memory GCS with one bucket, no credentials."""
    server = emulator_server.create_server("127.0.0.1", 0, in_memory=True, default_bucket=BUCKET)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{server._api._httpd.server_port}"
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", endpoint)
        monkeypatch.setenv("FSSPEC_GS_TOKEN", "anon")
        monkeypatch.setenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
        yield endpoint
    finally:
        server.stop()


def test_a_bucket_that_exists_passes_and_one_that_does_not_is_bad_input(gcs):
    assert check_bucket(f"gs://{BUCKET}/runs/train") is None
    with pytest.raises(SpecError, match="bucket gs://ckpt-bucket-typo does not exist") as refused:
        check_bucket("gs://ckpt-bucket-typo/runs/train")
    assert refused.value.exit_code == 2 and "gcloud storage buckets create" in refused.value.hint


def test_local_dirs_and_other_urls_are_not_asked_about(monkeypatch):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")  # would fail if it were asked
    assert check_bucket(None) is None
    assert check_bucket("/tmp/ck") is None
    assert check_bucket("s3://b/ck") is None


def test_cloud_storage_out_of_reach_is_a_warning_within_the_timeout(monkeypatch):
    silent = socket.socket()  # listens, never answers: a network that drops the request
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    try:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{silent.getsockname()[1]}")
        monkeypatch.setenv("FSSPEC_GS_TOKEN", "anon")
        warning = check_bucket("gs://somewhere/ck", timeout_s=1.0)
    finally:
        silent.close()
    assert warning is not None and "could not check that bucket gs://somewhere exists" in warning
