"""podmanager's page, served: the HTML, its CSS and scripts, the small JSON replies it polls and
`/metrics`, for one cluster per path (`/<cluster>/...`).

Where it is served (docs/channel.md says why):
- on a controller VM, inside the channel's own server, under `/v1/page/` (`page_app`): the
  same TLS, the same token, no port of its own; the laptop reaches it through `PageProxy`
  (`client/page_proxy.py`), which adds the token to each request;
- on a machine that is its own controller (`controller.local: true`), by `LocalPageServer`
  on 127.0.0.1 for as long as `podmanager dashboard` runs, to the owner's processes only.

Every reply is a GET (the page changes nothing) and says `Cache-Control: no-store`; the
page's Content-Security-Policy admits only its own files. A local server refuses a request
whose Host is not its own address (a web page elsewhere cannot rebind a name to it)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web

from podmanager.channel import page_files
from podmanager.channel.loop_thread import STOP_TIMEOUT_S, LoopServer
from podmanager.core import peer
from podmanager.core.errors import PodmanagerError

PAGE_PREFIX = "/v1/page"
LOCAL = "127.0.0.1"
SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'",
}


class ClusterPage(Protocol):
    """What the page shows of one cluster (`api/page_data.py::PageData`)."""

    def cluster(self) -> dict[str, Any]: ...

    def run_list(self, *, offset: int, limit: int, status: str | None, text: str | None) -> dict[str, Any]: ...

    def run(self, run_id: str) -> dict[str, Any]: ...

    def logs(self, run_id: str, host: str, offset: int) -> dict[str, Any]: ...

    def metric_points(self, run_id: str, offset: int) -> dict[str, Any]: ...

    def log_path(self, run_id: str, host: str) -> Path | None: ...

    def events(self, *, before: int | None, kind: str | None, slice_index: int | None, run_id: str | None,
               limit: int) -> dict[str, Any]: ...

    def service(self, service_id: str) -> dict[str, Any]: ...

    def metrics(self) -> str: ...

    def history(self) -> bytes: ...


Pages = Callable[[str], ClusterPage]  # a cluster's name -> its page's data (raises PodmanagerError if unknown)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def page_app(pages: Pages) -> web.Application:
    """The page as an application of its own (the channel's server mounts it under PAGE_PREFIX)."""
    app = web.Application()
    add_page_routes(app, pages)
    return app


def add_page_routes(app: web.Application, pages: Pages) -> None:
    """The page's routes, every one under `/<cluster>/`."""

    async def answer(request: web.Request, call: Callable[[ClusterPage], Any]) -> web.StreamResponse:
        cluster = request.match_info["cluster"]
        try:
            found = await asyncio.to_thread(lambda: call(pages(cluster)))
        except PodmanagerError as error:
            body = {"message": error.message, "hint": error.hint}
            return web.json_response(body, status=400 if error.exit_code == 2 else 500, headers=SECURITY_HEADERS)
        except ValueError as error:
            return web.json_response({"message": str(error)}, status=400, headers=SECURITY_HEADERS)
        if isinstance(found, str):
            return web.Response(body=found.encode(), headers={  # Prometheus's text format, version 0.0.4
                **SECURITY_HEADERS, "Content-Type": "text/plain; version=0.0.4; charset=utf-8"})
        if isinstance(found, bytes):  # the cluster's history, for the user's machine to keep
            return web.Response(body=found, headers={**SECURITY_HEADERS, "Content-Type": "application/zip",
                                                     "Content-Disposition": f'attachment; filename="{cluster}-history.zip"'})
        if isinstance(found, web.StreamResponse):
            return found
        return web.Response(text=json.dumps(found, separators=(",", ":")), content_type="application/json",
                            headers=SECURITY_HEADERS)

    def asset(name: str) -> Handler:
        async def serve(request: web.Request) -> web.StreamResponse:
            return web.Response(text=page_files.asset(name), content_type=page_files.content_type(name),
                                charset="utf-8", headers=SECURITY_HEADERS)
        return serve

    async def to_page(request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound(f"{request.match_info['cluster']}/")

    def number(request: web.Request, name: str, default: int | None) -> int | None:
        text = request.query.get(name, "")
        if text == "":
            return default
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{name}: {text!r} is not a whole number") from None

    async def runs(request: web.Request) -> web.StreamResponse:
        return await answer(request, lambda page: page.run_list(
            offset=number(request, "offset", 0) or 0, limit=number(request, "limit", 50) or 50,
            status=request.query.get("status") or None, text=request.query.get("q") or None))

    async def run(request: web.Request) -> web.StreamResponse:
        return await answer(request, lambda page: page.run(request.match_info["run"]))

    async def logs(request: web.Request) -> web.StreamResponse:
        return await answer(request, lambda page: page.logs(request.match_info["run"], request.query.get("host", ""),
                                                             number(request, "offset", 0) or 0))

    async def metric_points(request: web.Request) -> web.StreamResponse:
        return await answer(request, lambda page: page.metric_points(request.match_info["run"],
                                                                      number(request, "offset", 0) or 0))

    async def log_file(request: web.Request) -> web.StreamResponse:
        run_id, host = request.match_info["run"], request.query.get("host", "")

        def file(page: ClusterPage) -> web.StreamResponse:
            path = page.log_path(run_id, host)
            if path is None:
                return web.json_response({"message": f"host {host} of run {run_id} wrote no output"}, status=404,
                                         headers=SECURITY_HEADERS)
            name = f"{run_id}-{host.replace('/', '-')}.log"
            return web.FileResponse(path, headers={**SECURITY_HEADERS, "Content-Type": "text/plain; charset=utf-8",
                                                   "Content-Disposition": f'attachment; filename="{name}"'})
        return await answer(request, file)

    async def events(request: web.Request) -> web.StreamResponse:
        return await answer(request, lambda page: page.events(
            before=number(request, "before", None), kind=request.query.get("kind") or None,
            slice_index=number(request, "slice", None), run_id=request.query.get("run") or None,
            limit=number(request, "limit", 200) or 200))

    async def service(request: web.Request) -> web.StreamResponse:
        return await answer(request, lambda page: page.service(request.match_info["service"]))

    async def cluster(request: web.Request) -> web.StreamResponse:
        return await answer(request, lambda page: page.cluster())

    async def metrics(request: web.Request) -> web.StreamResponse:
        return await answer(request, lambda page: page.metrics())

    async def history(request: web.Request) -> web.StreamResponse:
        return await answer(request, lambda page: page.history())

    app.router.add_get("/{cluster}", to_page)
    app.router.add_get("/{cluster}/", asset("index.html"))
    for name in page_files.ASSETS:
        app.router.add_get(f"/{{cluster}}/{name}", asset(name))
    app.router.add_get("/{cluster}/metrics", metrics)
    app.router.add_get("/{cluster}/api/cluster", cluster)
    app.router.add_get("/{cluster}/api/runs", runs)
    app.router.add_get("/{cluster}/api/run/{run}", run)
    app.router.add_get("/{cluster}/api/run/{run}/logs", logs)
    app.router.add_get("/{cluster}/api/run/{run}/log", log_file)
    app.router.add_get("/{cluster}/api/run/{run}/metrics", metric_points)
    app.router.add_get("/{cluster}/api/events", events)
    app.router.add_get("/{cluster}/api/service/{service}", service)
    app.router.add_get("/{cluster}/api/history", history)


def local_guard(port: Callable[[], int]) -> Callable[..., Awaitable[web.StreamResponse]]:
    """A middleware for a server on this machine's loopback: only the owner's processes, and
    only requests addressed to it by its own address (no DNS rebinding of another name)."""

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        transport = request.transport
        client = transport.get_extra_info("peername") if transport else None
        server = transport.get_extra_info("sockname") if transport else None
        if client and server:
            reason = peer.refusal(client[0], client[1], server=(server[0], server[1]))
            if reason is not None:
                return web.json_response({"message": reason}, status=403)
        if request.host not in (f"{LOCAL}:{port()}", f"localhost:{port()}"):
            return web.json_response({"message": f"this page answers only as {LOCAL}:{port()}, not {request.host}"},
                                     status=421)
        return await handler(request)

    return guard


def front_routes(app: web.Application, cluster: str) -> None:
    """`/` opens the cluster's page and `/metrics` is its metrics: the address the user is given."""
    async def home(request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound(f"/{cluster}/")

    async def metrics(request: web.Request) -> web.StreamResponse:
        raise web.HTTPTemporaryRedirect(f"/{cluster}/metrics")

    app.router.add_get("/", home)
    app.router.add_get("/metrics", metrics)


class LocalPageServer(LoopServer):
    """The page of `cluster` on 127.0.0.1:`port` (0: any free one), from a thread of its own."""

    def __init__(self, cluster: str, pages: Pages, *, port: int = 0):
        super().__init__("podmanager-page", port)
        self.cluster = cluster
        self._app = web.Application(middlewares=[local_guard(lambda: self.port)])
        front_routes(self._app, cluster)
        add_page_routes(self._app, pages)
        self._runner: web.AppRunner | None = None

    async def _listen(self) -> int:
        self._runner = web.AppRunner(self._app, shutdown_timeout=STOP_TIMEOUT_S / 2)
        await self._runner.setup()
        await web.TCPSite(self._runner, LOCAL, self.port).start()
        return int(self._runner.addresses[0][1])

    @property
    def url(self) -> str:
        return f"http://{LOCAL}:{self.port}/"

    def stop(self) -> None:
        runner, self._runner = self._runner, None
        self._thread.stop(runner.cleanup() if runner is not None else None)

