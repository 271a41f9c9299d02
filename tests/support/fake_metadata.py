"""A VM's metadata server as far as a boot's install asks it, served on 127.0.0.1 by a test: the
service account's token, and guest attributes written with PUT (kept, to be read back)."""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

TOKEN_PATH = "/computeMetadata/v1/instance/service-accounts/default/token"
ATTRIBUTES = "/computeMetadata/v1/instance/guest-attributes/"


@dataclass
class FakeMetadata:
    root: str  # http://127.0.0.1:PORT/computeMetadata/v1
    address: str  # 127.0.0.1:PORT, as GCE_METADATA_IP names it
    token: str
    token_reads: int = 0
    attributes: dict[str, str] = field(default_factory=dict)  # "podmanager/boot" -> "error"


@contextlib.contextmanager
def serve_metadata(token: str) -> Iterator[FakeMetadata]:
    fake: FakeMetadata

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path != TOKEN_PATH or self.headers.get("Metadata-Flavor") != "Google":
                return self._send(404, "")
            fake.token_reads += 1
            self._send(200, json.dumps({"access_token": fake.token, "expires_in": 3599, "token_type": "Bearer"}))

        def do_PUT(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
            if self.path.startswith(ATTRIBUTES):
                fake.attributes[self.path.removeprefix(ATTRIBUTES)] = body
            self._send(200, "")

        def _send(self, code: int, body: str) -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    address = f"127.0.0.1:{server.server_address[1]}"
    fake = FakeMetadata(f"http://{address}/computeMetadata/v1", address, token)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
