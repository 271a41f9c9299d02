"""The controller's end of the channel: an aiohttp HTTPS server answering each verb's request
with the API it is given, to clients that present the cluster's token.

Every request must carry `Authorization: Bearer <token>`, compared in constant time; any other
gets a 401 before its body is read. On loopback (a dry run) a connection is also admitted only
from the owner's processes (core/peer.py), as every server podmanager starts. The API's calls
block (SQLite, Ray), so each runs in a worker thread; the loop only moves bytes.
`ChannelServer` runs it all on a thread of its own, stopped by whoever started it."""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import ssl
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from aiohttp import WSCloseCode, web
from pydantic import BaseModel, ValidationError

from podmanager.channel import records
from podmanager.channel.identity import ControllerIdentity
from podmanager.channel.loop_thread import STOP_TIMEOUT_S, LoopServer
from podmanager.channel.page_server import PAGE_PREFIX, ClusterPage, page_app
from podmanager.channel.verbs import VERBS, Verb
from podmanager.channel.ws_pipe import pipe
from podmanager.core import peer
from podmanager.core.errors import PodmanagerError

MAX_BODY_BYTES = 1 << 20  # requests are names, numbers, a spec and a workload
MAX_CODE_BYTES = 80 << 20  # a working dir's zip: its limit (64 MiB, core/code_zip.py) and room


class ControllerApi(Protocol):
    """What the channel serves: the API on the controller. Beside these, one method per verb of
    `verbs.ChannelVerbs`, named as the verb, taking its request record and returning its reply
    record (looked up per request: a test's fake need have only the verbs it is asked for).
    Each raises PodmanagerError for what the user must hear (an unknown cluster, ...)."""

    def forward_target(self, cluster: str, target: str) -> tuple[str, int]:
        """(host, port) on the controller's side that a forward to `target` reaches."""
        ...

    def page(self, cluster: str) -> ClusterPage:
        """What podmanager's page shows of `cluster` (served under PAGE_PREFIX, token required)."""
        ...


RequestT = TypeVar("RequestT", bound=BaseModel)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def build_app(api: ControllerApi, token: str) -> web.Application:
    if not token:
        raise ValueError("the channel needs the cluster's token")
    expected = token.encode()

    @web.middleware
    async def owner_only(request: web.Request, handler: Handler) -> web.StreamResponse:
        transport = request.transport
        client = transport.get_extra_info("peername") if transport else None
        server = transport.get_extra_info("sockname") if transport else None
        if client and server and ipaddress.ip_address(client[0].split("%")[0]).is_loopback:
            reason = peer.refusal(client[0], client[1], server=(server[0], server[1]))
            if reason is not None:
                return _error(403, reason, exit_code=2)
        return await handler(request)

    @web.middleware
    async def bearer_token(request: web.Request, handler: Handler) -> web.StreamResponse:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected):
            response = _error(401, "the controller refused the channel token: it is missing or not this cluster's",
                              exit_code=2)
            response.headers["WWW-Authenticate"] = 'Bearer realm="podmanager"'
            return response
        return await handler(request)

    def answer(verb: Verb[Any, Any]) -> Handler:
        """The route of one verb: its request read (JSON as its record, or the zip's bytes) and
        answered by the API's method of its name, in a worker thread."""
        async def route(request: web.Request) -> web.StreamResponse:
            # The zip is bounded by the app's client_max_size; every JSON body by MAX_BODY_BYTES.
            asked = await request.read() if verb.request is bytes else await _body(request, verb.request)
            return await _answer(lambda: getattr(api, verb.name)(asked))
        return route

    async def forward(request: web.Request) -> web.StreamResponse:
        """One TCP connection to what `target` names (the dashboard, a service's router),
        carried as binary WebSocket messages both ways until either side closes."""
        cluster, target = request.query.get("cluster", ""), request.query.get("target", "")
        try:
            host, port = await asyncio.to_thread(api.forward_target, cluster, target)
            reader, writer = await asyncio.open_connection(host, port)
        except PodmanagerError as error:
            return _error(400 if error.exit_code == 2 else 500, error.message, hint=error.hint,
                          exit_code=error.exit_code)
        except OSError as error:
            return _error(502, f"the controller cannot reach {target} of {cluster}: {error}")
        socket = web.WebSocketResponse(max_msg_size=0)
        await socket.prepare(request)
        forwards.add(socket)
        try:
            await pipe(socket, reader, writer)
        finally:
            forwards.discard(socket)
        return socket

    async def caller(request: web.Request) -> web.StreamResponse:
        """Where this (authenticated) request came from: what `access add` adds to the rule."""
        peer_address = request.transport.get_extra_info("peername") if request.transport else None
        if not peer_address:
            return _error(500, "the controller cannot tell where this request came from")
        return web.Response(text=records.CallerReply(address=peer_address[0]).model_dump_json(),
                            content_type="application/json")

    forwards: weakref.WeakSet[web.WebSocketResponse] = weakref.WeakSet()

    async def close_forwards(app: web.Application) -> None:
        """A stopping server ends its forwards (they would hold its shutdown open)."""
        for socket in list(forwards):
            await socket.close(code=WSCloseCode.GOING_AWAY)

    # The code's zip is the one large body; every JSON body is held to MAX_BODY_BYTES in `_body`.
    app = web.Application(client_max_size=MAX_CODE_BYTES, middlewares=[owner_only, bearer_token])
    for verb in VERBS:
        app.router.add_route(verb.method, verb.path, answer(verb))
    app.router.add_get(records.FORWARD_PATH, forward)
    app.router.add_get(records.CALLER_PATH, caller)
    # The page: GETs only, behind the same two middlewares (a parent's apply to its sub-apps).
    app.add_subapp(PAGE_PREFIX, page_app(lambda cluster: api.page(cluster)))
    app.on_shutdown.append(close_forwards)
    return app


async def _body(request: web.Request, model: type[RequestT]) -> RequestT:
    """The request's body as `model`; a 413 past MAX_BODY_BYTES, a 400 saying which field is
    wrong (each raised as the response)."""
    try:
        asked = model.model_validate_json(await _bounded(request, MAX_BODY_BYTES))
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "the body"
        raise _bad_request(f"{field}: {first['msg']}") from None
    problem = records.number_problem(asked)
    if problem is not None:
        raise _bad_request(problem)
    return asked


async def _bounded(request: web.Request, limit: int) -> bytes:
    """The body, read only up to `limit` bytes: a sized body is refused by its length before it
    is read, a chunked one (no length given) once it passes the limit."""
    if request.content_length is not None and request.content_length > limit:
        raise _too_large(limit, request.content_length)
    body = bytearray()
    async for chunk in request.content.iter_chunked(64 << 10):
        body += chunk
        if len(body) > limit:
            raise _too_large(limit, len(body))
    return bytes(body)


def _too_large(limit: int, size: int) -> web.HTTPRequestEntityTooLarge:
    reply = records.ErrorReply(message=f"the request is {size} bytes or more; at most {limit} are read", exit_code=2)
    return web.HTTPRequestEntityTooLarge(limit, size, text=reply.model_dump_json(), content_type="application/json")


def _bad_request(message: str) -> web.HTTPBadRequest:
    reply = records.ErrorReply(message=message, exit_code=2)
    return web.HTTPBadRequest(text=reply.model_dump_json(), content_type="application/json")


async def _answer(call: Callable[[], BaseModel]) -> web.Response:
    """The API's answer to one request, called in a worker thread; its PodmanagerError as an
    ErrorReply the client raises again."""
    try:
        reply = await asyncio.to_thread(call)
    except PodmanagerError as error:
        return _error(400 if error.exit_code == 2 else 500, error.message, hint=error.hint, exit_code=error.exit_code)
    return web.json_response(text=reply.model_dump_json())


def _error(status: int, message: str, *, hint: str | None = None, exit_code: int = 1) -> web.Response:
    reply = records.ErrorReply(message=message, hint=hint, exit_code=exit_code)
    return web.Response(status=status, text=reply.model_dump_json(), content_type="application/json")


def tls_context(identity: ControllerIdentity) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(identity.cert_path, identity.key_path)
    return context


class ChannelServer(LoopServer):
    """The channel served on `identity.address` (port 0: any free one) from a thread of its own.

        with ChannelServer(api, identity) as server:
            ... server.port ...

    `start` returns once it listens (or raises why it could not); `stop` closes it and joins the
    thread, also when called from a failure path or twice."""

    def __init__(self, api: ControllerApi, identity: ControllerIdentity, *, port: int = 0, bind: str | None = None):
        """`bind`: the address to listen on, when not the one the certificate names (a VM's
        external address is its NAT's, not its interface's)."""
        super().__init__("podmanager-channel", port)
        self._app = build_app(api, identity.token())
        self._ssl = tls_context(identity)
        self.host = bind or identity.address
        self._runner: web.AppRunner | None = None

    async def _listen(self) -> int:
        self._runner = web.AppRunner(self._app, shutdown_timeout=STOP_TIMEOUT_S / 2)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port, ssl_context=self._ssl).start()
        self.host = str(self._runner.addresses[0][0])  # as the socket is bound, which tests check
        return int(self._runner.addresses[0][1])

    def stop(self) -> None:
        runner, self._runner = self._runner, None
        self._thread.stop(runner.cleanup() if runner is not None else None)
