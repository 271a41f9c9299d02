"""A port on the user's machine that reaches something on the controller's side (the Ray
dashboard and its job API, a service's router) through the channel: each TCP connection made to
127.0.0.1:PORT is carried as one WebSocket (`/v1/forward`, the same pinned certificate and
token as every verb) to the controller, which connects it onward. Only this user's processes
may connect to the local port (`core/peer.py`), as every server podmanager starts.

    with Forward(credentials, "dashboard") as forward:
        ... http://127.0.0.1:{forward.port} ...

Loads aiohttp, never Ray or JAX: this is the laptop's side."""

from __future__ import annotations

import asyncio

import aiohttp

from podmanager.channel import records
from podmanager.channel.loop_thread import LoopServer
from podmanager.channel.ws_pipe import pipe
from podmanager.client.pinned import ClientCredentials
from podmanager.core import peer

LOCAL = "127.0.0.1"


class Forward(LoopServer):
    """Serves 127.0.0.1:`port` (0: any free one) on a thread of its own until `stop`."""

    def __init__(self, credentials: ClientCredentials, target: str, *, port: int = 0):
        super().__init__("podmanager-forward", port)
        self.credentials = credentials
        self.target = target
        self._server: asyncio.base_events.Server | None = None
        self._carrying: set[asyncio.Task[None]] = set()
        self._ssl = credentials.tls_context()
        address = credentials.address
        self._url = f"https://{address.host}:{address.port}{records.FORWARD_PATH}"

    async def _listen(self) -> int:
        self._server = await asyncio.start_server(self._carry, LOCAL, self.port)
        return int(self._server.sockets[0].getsockname()[1])

    async def _carry(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._carrying.add(task)
        try:
            await self._carry_one(reader, writer)
        finally:
            self._carrying.discard(task)

    async def _carry_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        client = writer.get_extra_info("peername")
        server = writer.get_extra_info("sockname")
        if peer.refusal(client[0], client[1], server=(server[0], server[1])) is not None:
            writer.close()
            return
        headers = {"Authorization": f"Bearer {self.credentials.token}"}
        params = {"cluster": self.credentials.cluster, "target": self.target}
        try:
            async with aiohttp.ClientSession() as session, session.ws_connect(
                    self._url, params=params, headers=headers, ssl=self._ssl, max_msg_size=0) as socket:
                await pipe(socket, reader, writer)
        except (aiohttp.ClientError, OSError):
            pass  # the controller refused or is gone: the local connection just closes
        finally:
            writer.close()

    def stop(self) -> None:
        """Every connection carried is ended cleanly (the controller sees its WebSocket close)."""
        server, self._server = self._server, None
        try:
            self._thread.stop(self._end(server) if server is not None else None)
        except TimeoutError:
            pass  # a connection that would not end: it goes with the loop

    async def _end(self, server: asyncio.base_events.Server) -> None:
        server.close()
        for task in list(self._carrying):
            task.cancel()
        if self._carrying:
            await asyncio.wait(list(self._carrying), timeout=3.0)
