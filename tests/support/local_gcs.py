"""A local Google Cloud Storage (the test extra's gcp-storage-emulator) serving one empty bucket
in memory, for the tests that read and write gs:// paths through Google's own client."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest


@contextmanager
def local_gcs(bucket: str) -> Iterator[str]:
    """Its http://127.0.0.1:PORT while inside; skips the test when the emulator is not installed."""
    emulator_server = pytest.importorskip(
        "gcp_storage_emulator.server", reason="the GCS emulator is in the test extra: pip install -e '.[test]'")
    server = emulator_server.create_server("127.0.0.1", 0, in_memory=True, default_bucket=bucket)
    server.start()
    try:
        # create_server binds port 0 to a free port but does not report it; its HTTP server knows.
        yield f"http://127.0.0.1:{server._api._httpd.server_port}"
    finally:
        server.stop()
