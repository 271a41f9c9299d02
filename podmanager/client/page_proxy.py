"""The laptop's end of podmanager's page for a cluster whose controller is a VM: 127.0.0.1:PORT,
to this user's processes only, relaying each GET to the controller's page (`/v1/page/<cluster>/...`,
`channel/page_server.py`) over the channel with its pinned certificate, adding the cluster's
token as the request's `Authorization` header. The token never reaches the browser: no URL,
cookie or page holds it (docs/channel.md says why).

    with PageProxy(credentials) as proxy:
        ... proxy.url ...

Loads aiohttp, never Ray or JAX: this is the laptop's side."""

from __future__ import annotations

import aiohttp
from aiohttp import web

from podmanager.channel.loop_thread import STOP_TIMEOUT_S, LoopServer
from podmanager.channel.page_server import (
    LOCAL,
    PAGE_PREFIX,
    SECURITY_HEADERS,
    front_routes,
    local_guard,
)
from podmanager.client.pinned import ClientCredentials

# What the controller's reply keeps on its way to the browser.
_KEPT_HEADERS = ("Content-Type", "Content-Disposition", "Cache-Control", "X-Content-Type-Options", "X-Frame-Options",
                 "Referrer-Policy", "Content-Security-Policy", "Location")
_TIMEOUT = aiohttp.ClientTimeout(total=60, sock_connect=10)
LOCAL_RAY_PATH = "/_local/ray"  # answered here, not relayed: where this machine reaches the Ray dashboard


class PageProxy(LoopServer):
    def __init__(self, credentials: ClientCredentials, *, port: int = 0, ray_url: str | None = None):
        """`ray_url`: where this machine reaches the cluster's Ray dashboard (a forward of its
        own), which the page links to."""
        super().__init__("podmanager-page-proxy", port)
        self.ray_url = ray_url
        self.credentials = credentials
        self.cluster = credentials.cluster
        address = credentials.address
        self._base = f"https://{address.host}:{address.port}{PAGE_PREFIX}"
        self._ssl = credentials.tls_context()
        self._session: aiohttp.ClientSession | None = None
        self._app = web.Application(middlewares=[local_guard(lambda: self.port)])
        front_routes(self._app, self.cluster)
        self._app.router.add_get(LOCAL_RAY_PATH, self._ray)
        self._app.router.add_get("/{path:.*}", self._relay)
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://{LOCAL}:{self.port}/"

    async def _listen(self) -> int:
        self._session = aiohttp.ClientSession(timeout=_TIMEOUT)
        self._runner = web.AppRunner(self._app, shutdown_timeout=STOP_TIMEOUT_S / 2)
        await self._runner.setup()
        await web.TCPSite(self._runner, LOCAL, self.port).start()
        return int(self._runner.addresses[0][1])

    async def _ray(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"url": self.ray_url}, headers=SECURITY_HEADERS)

    async def _relay(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        headers = {"Authorization": f"Bearer {self.credentials.token}"}
        try:
            async with self._session.get(f"{self._base}{request.rel_url.raw_path}", params=request.rel_url.query,
                                         headers=headers, ssl=self._ssl, allow_redirects=False) as upstream:
                reply = web.StreamResponse(status=upstream.status, headers={
                    k: v for k, v in upstream.headers.items() if k in _KEPT_HEADERS})
                await reply.prepare(request)
                async for chunk in upstream.content.iter_chunked(1 << 16):
                    await reply.write(chunk)
                await reply.write_eof()
                return reply
        except (aiohttp.ClientError, OSError, TimeoutError) as error:
            return web.json_response({"message": f"the controller of {self.cluster} is not reachable: {error}"},
                                     status=502)

    def stop(self) -> None:
        runner, self._runner = self._runner, None
        session, self._session = self._session, None

        async def close() -> None:
            if runner is not None:
                await runner.cleanup()
            if session is not None:
                await session.close()

        self._thread.stop(close() if runner is not None or session is not None else None)
