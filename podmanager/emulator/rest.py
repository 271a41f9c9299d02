"""The REST side of the emulated Google services, for what a VM's startup script fetches with
curl: routes that each answer the GETs they know, served on one port from a background thread.

A route is a function of the request's path (with its query) and headers (names in lower
case: HTTP's are case-insensitive) that returns the `Answer`, or None for a path that is not
its own; the server asks each in turn, and answers 404 when none knows the path. Errors carry
Google's JSON error body. Every request is first checked against Google's API definitions
(`schema_gate.Gate`: refused as Google refuses it; in strict mode the answer is checked too).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Mapping, Sequence

from podmanager.core.peer import OwnerOnlyRequests
from podmanager.emulator.schema_gate import Gate

JSON = "application/json; charset=UTF-8"


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    content_type: str = JSON


Route = Callable[[str, Mapping[str, str]], Answer | None]  # (path with query, headers) -> answer; None: not mine


@dataclass(frozen=True)
class Request:
    """One request of any method, for the routes that change things (Compute Engine's inserts and deletes)."""

    method: str
    path: str  # with its query
    headers: Mapping[str, str]  # names in lower case
    body: bytes

    def json_object(self) -> dict[str, Any]:
        """The body as a JSON object; {} when it is empty or not one."""
        try:
            found = json.loads(self.body or b"{}")
        except ValueError:
            return {}
        return found if isinstance(found, dict) else {}


RequestRoute = Callable[[Request], Answer | None]  # any method; None: not mine


def json_answer(status: int, body: dict[str, Any]) -> Answer:
    return Answer(status, json.dumps(body).encode())


def error_answer(status: int, code: str, message: str) -> Answer:
    """Google's error body: {"error": {"code", "message", "status"}}."""
    return json_answer(status, {"error": {"code": status, "message": message, "status": code}})


def unauthenticated(headers: Mapping[str, str]) -> Answer | None:
    """The 401 Google answers a request without an OAuth bearer token; None when it has one
    (any token: the emulator checks no credentials, only that the caller sends them)."""
    if headers.get("authorization", "").startswith("Bearer "):
        return None
    return error_answer(401, "UNAUTHENTICATED",
                        "Request is missing required authentication credential. Expected OAuth 2 access token.")


def serve(routes: Sequence[Route], host: str = "127.0.0.1", port: int = 0,
          name: str = "emulator-rest", request_routes: Sequence[RequestRoute] = (),
          gate: Gate | None = None, iam: RequestRoute | None = None) -> tuple[ThreadingHTTPServer, int]:
    """Serve `routes` (GETs) and `request_routes` (any method, asked after `routes`) on host:port
    (0: any free port) from a background thread, each request checked by `gate` (default: as
    the environment says) and first by `iam`, whose answer refuses it (the project's IAM:
    `emulator/iam/gate.py`); returns (server, port). Stop it with `server.shutdown()` and
    `server.server_close()`."""
    server = ThreadingHTTPServer((host, port), _handler(tuple(routes), tuple(request_routes),
                                                        gate or Gate.from_environment(), iam))
    server.daemon_threads = True
    # Polls for a shutdown every 0.05 s (http.server's default 0.5 s would slow every stop).
    threading.Thread(target=server.serve_forever, args=(0.05,), name=name, daemon=True).start()
    return server, server.server_address[1]


def _handler(routes: tuple[Route, ...], request_routes: tuple[RequestRoute, ...],
             gate: Gate, iam: RequestRoute | None = None) -> type[BaseHTTPRequestHandler]:
    class Handler(OwnerOnlyRequests):  # only the owner's processes: it serves the Ray token
        def refuse(self, reason: str) -> None:
            self._send(error_answer(403, "PERMISSION_DENIED", reason))

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self._answer()

        def do_POST(self) -> None:  # noqa: N802
            self._answer()

        def do_PATCH(self) -> None:  # noqa: N802
            self._answer()

        def do_PUT(self) -> None:  # noqa: N802
            self._answer()

        def do_DELETE(self) -> None:  # noqa: N802
            self._answer()

        def _answer(self) -> None:
            headers = {key.lower(): value for key, value in self.headers.items()}
            length = int(headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            request = Request(self.command, self.path, headers, body)
            answer = iam(request) if iam is not None else None  # who calls, before what they send
            if answer is not None:
                self._send(answer)
                return
            checked = gate.rest_request(self.command, self.path, body)
            if checked.refused is not None:
                self._send(json_answer(checked.refused["error"]["code"], checked.refused))
                return
            if self.command == "GET":
                answer = next(filter(None, (route(self.path, headers) for route in routes)), None)
            if answer is None and request_routes:
                answer = next(filter(None, (route(request) for route in request_routes)), None)
            if answer is None:
                answer = error_answer(404, "NOT_FOUND", f"no such route: {self.command} {self.path}")
            broken = gate.rest_answer(checked, answer.status, answer.body, answer.content_type)
            self._send(answer if broken is None else json_answer(500, broken))

        def _send(self, answer: Answer) -> None:
            self.send_response(answer.status)
            self.send_header("Content-Type", answer.content_type)
            self.send_header("Content-Length", str(len(answer.body)))
            self.end_headers()
            self.wfile.write(answer.body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's signature
            pass  # every booting VM asks; the emulator's output is for its address, not access logs

    return Handler
