"""A VM whose boot cannot reach what it needs (the bucket, Secret Manager, the package index)
reports `error` naming the address well within 90 s, instead of waiting out TCP's timeouts.

The rendered startup script runs with bash as a simulated VM runs it (its own root folder, a
metadata server of the test's own), against an address that never answers a connection: a
local socket whose accept queue is full, so the kernel drops further SYNs as a firewall or a
missing route would. The connect timeout is shortened through the variable a simulated VM may
set; the real one's bound is `startup.UNREACHABLE_WITHIN_S`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from podmanager.controller import startup
from podmanager.controller.software import Software, content_version
from podmanager.controller.startup import render_startup_script

CONNECT_TIMEOUT_S = 1
# The bound a shortened timeout gives (3 tries of 1 s, 1 s apart), with room for a loaded machine.
WITHIN_S = startup.TRIES * CONNECT_TIMEOUT_S + startup.TRIES + 20


def test_the_real_bound_is_within_ninety_seconds() -> None:
    assert startup.UNREACHABLE_WITHIN_S <= 60


@pytest.fixture
def unanswering() -> Iterator[str]:
    """host:port of a listener whose accept queue is full: a connection to it never completes."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    address = listener.getsockname()
    queued: list[socket.socket] = []
    while True:  # connect until one hangs: from then on the kernel drops every SYN
        client = socket.socket()
        client.settimeout(0.5)
        try:
            client.connect(address)
        except (TimeoutError, socket.timeout):
            client.close()
            break
        queued.append(client)
    yield f"{address[0]}:{address[1]}"
    for client in queued:
        client.close()
    listener.close()


@dataclass
class FakeMetadata:
    """A VM's metadata server: a token, the project, and the guest attributes the boot writes."""

    url: str = ""
    attributes: dict[str, str] = field(default_factory=dict)


@pytest.fixture
def metadata() -> Iterator[FakeMetadata]:
    fake = FakeMetadata()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            answers = {"/computeMetadata/v1/instance/service-accounts/default/token":
                       json.dumps({"access_token": "ya29.fake", "expires_in": 3599, "token_type": "Bearer"}),
                       "/computeMetadata/v1/project/project-id": "my-project"}
            self._send(200, answers[self.path]) if self.path in answers else self._send(404, "")

        def do_PUT(self) -> None:  # noqa: N802 - http.server's name
            key = self.path.rsplit("/", 1)[-1]
            fake.attributes[key] = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
            self._send(200, "")

        def _send(self, code: int, body: str) -> None:
            self.send_response(code)
            self.send_header("Content-Length", str(len(body.encode())))
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's signature
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}/computeMetadata/v1"
    yield fake
    server.shutdown()
    server.server_close()
    thread.join()


def boot(tmp_path: Path, metadata: FakeMetadata, software: Software, **env: str) -> float:
    """Run the startup script to its end as a VM would; the seconds it took."""
    script = tmp_path / "startup-script"
    script.write_text(render_startup_script("demo", software, "demo-ray-token"))
    environ = {"PATH": os.environ["PATH"], "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
               "PODMANAGER_ROOT": str(tmp_path / "vm"), "PODMANAGER_METADATA_URL": metadata.url,
               "PODMANAGER_CONNECT_TIMEOUT_S": str(CONNECT_TIMEOUT_S), "UV_HTTP_TIMEOUT": str(CONNECT_TIMEOUT_S),
               "PIP_CONFIG_FILE": os.devnull, **env}
    (tmp_path / "vm").mkdir(exist_ok=True)
    started = time.monotonic()
    process = subprocess.Popen(["bash", str(script)], env=environ, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        code = process.wait(timeout=90)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert code == 1
    return time.monotonic() - started


def software(source: str) -> Software:
    return Software.pinned_to_controller(podmanager=content_version(), podmanager_source=source, tpu=False)


def test_a_bucket_it_cannot_reach_is_named_within_the_bound(tmp_path: Path, metadata: FakeMetadata,
                                                            unanswering: str) -> None:
    took = boot(tmp_path, metadata, software("gs://stage-bkt/boot/podmanager-0.1.0-py3-none-any.whl"),
                PODMANAGER_STORAGE_API=f"http://{unanswering}")

    assert metadata.attributes["boot"] == "error"
    detail = metadata.attributes["boot-detail"]
    assert f"cannot reach {unanswering} for the podmanager wheel gs://stage-bkt/boot/" in detail
    assert "Cloud NAT and Private Google Access" in detail and "Timeout was reached" in detail
    assert took < WITHIN_S


def test_a_secret_manager_it_cannot_reach_is_named_within_the_bound(tmp_path: Path, metadata: FakeMetadata,
                                                                    unanswering: str) -> None:
    # The VM has the software already (this environment), so its boot goes straight to the token.
    base = tmp_path / "vm" / "opt" / "podmanager"
    base.mkdir(parents=True)
    (base / "venv").symlink_to(sys.prefix)

    took = boot(tmp_path, metadata, software("podmanager==0.1.0"), PODMANAGER_SECRETS_API=f"http://{unanswering}/v1")

    assert metadata.attributes["boot"] == "error"
    assert f"cannot reach {unanswering} for the Ray token secret demo-ray-token" in metadata.attributes["boot-detail"]
    assert took < WITHIN_S


def test_a_package_index_it_cannot_reach_is_named_within_the_bound(tmp_path: Path, metadata: FakeMetadata,
                                                                   unanswering: str) -> None:
    took = boot(tmp_path, metadata, software("podmanager==0.1.0"), PIP_INDEX_URL=f"http://{unanswering}/simple")

    assert metadata.attributes["boot"] == "error"
    detail = metadata.attributes["boot-detail"]
    assert detail.startswith(f"install uv {software('x').uv} from http://{unanswering}/simple failed")
    assert took < WITHIN_S
