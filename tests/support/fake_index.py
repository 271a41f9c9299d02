"""A package index (PEP 503's simple API) served on 127.0.0.1 by a test, holding wheels the test
builds: what a spec's `boot.index_url` names in a test. It records what it was asked and with
which credentials, and may require some (as an Artifact Registry repository does)."""

from __future__ import annotations

import base64
import contextlib
import functools
import http.server
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from wheels import build_wheel


@dataclass
class FakeIndex:
    url: str  # http://127.0.0.1:PORT/simple/
    root: Path
    requests: list[str] = field(default_factory=list)  # the paths asked for, in order
    credentials: list[str] = field(default_factory=list)  # "user:password" of each request that sent any

    def add(self, name: str, version: str, source: str = "", requires: tuple[str, ...] = ()) -> Path:
        """A wheel of `name` built and listed on the index."""
        project = self.root / "simple" / name
        project.mkdir(parents=True, exist_ok=True)
        wheel = build_wheel(project, name, version, source, requires)
        links = "".join(f'<a href="{w.name}">{w.name}</a>\n' for w in sorted(project.glob("*.whl")))
        (project / "index.html").write_text(links)
        return wheel


@contextlib.contextmanager
def serve_index(root: Path, *, required: str | None = None) -> Iterator[FakeIndex]:
    """An index over the folder `root`; `required`: the "user:password" without which it answers 401."""
    root.mkdir(parents=True, exist_ok=True)
    index: FakeIndex

    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            index.requests.append(self.path)
            sent = self.headers.get("Authorization", "")
            if sent.startswith("Basic "):
                index.credentials.append(base64.b64decode(sent[6:]).decode())
            if required is not None and sent != "Basic " + base64.b64encode(required.encode()).decode():
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="index"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            super().do_GET()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
    index = FakeIndex(f"http://127.0.0.1:{server.server_address[1]}/simple/", root)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield index
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
