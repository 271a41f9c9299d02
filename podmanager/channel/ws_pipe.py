"""One TCP connection carried over one WebSocket, both ways, until either side ends: the
controller's end of a forward (`server.py`) and the laptop's (`forward.py`) are the same loop."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from aiohttp import WSMsgType


class BinarySocket(Protocol):
    """What aiohttp's server and client WebSockets both offer."""

    def __aiter__(self) -> Any: ...

    async def send_bytes(self, data: bytes) -> None: ...

    async def close(self) -> bool: ...


async def pipe(socket: BinarySocket, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Bytes from the TCP connection to the WebSocket and back; both closed at the end."""

    async def to_socket() -> None:
        while data := await reader.read(1 << 16):
            await socket.send_bytes(data)

    async def to_connection() -> None:
        async for message in socket:
            if message.type is not WSMsgType.BINARY:
                break
            writer.write(message.data)
            await writer.drain()

    tasks = [asyncio.ensure_future(to_socket()), asyncio.ensure_future(to_connection())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        writer.close()
        await socket.close()
