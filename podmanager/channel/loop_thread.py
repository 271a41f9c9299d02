"""An asyncio loop on a thread of its own: how the channel's server (on the controller) and a
forward (on the laptop) run beside code that is not async. `start` returns once the loop runs;
`call` runs a coroutine there and waits for it; `stop` runs a last coroutine (closing what was
opened), stops the loop and joins the thread, also from a failure path or twice.

`LoopServer` is what both servers share: started, it listens on its loop's thread and returns
its port; a failed start stops what it began; `with` stops it."""

from __future__ import annotations

import asyncio
import threading
from abc import ABC, abstractmethod
from collections.abc import Coroutine
from typing import Any, Self, TypeVar

T = TypeVar("T")
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0


class LoopThread:
    def __init__(self, name: str):
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=self.name, daemon=True)
        self._thread.start()

    def call(self, coroutine: Coroutine[Any, Any, T], timeout_s: float) -> T:
        assert self._loop is not None, "start the loop first"
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=timeout_s)

    def stop(self, last: Coroutine[Any, Any, object] | None = None) -> None:
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        if loop is None or thread is None:
            if last is not None:
                last.close()  # never awaited: said so, not warned of
            return
        try:
            if last is not None:
                asyncio.run_coroutine_threadsafe(last, loop).result(timeout=STOP_TIMEOUT_S)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=STOP_TIMEOUT_S)
            if not thread.is_alive():
                loop.close()


class LoopServer(ABC):
    """A server listening from a `LoopThread`: `_listen` opens it there, `stop` closes it."""

    def __init__(self, thread_name: str, port: int):
        self.port = port  # 0 until started: any free one
        self._thread = LoopThread(thread_name)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> int:
        self._thread.start()
        try:
            self.port = self._thread.call(self._listen(), START_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise
        return self.port

    @abstractmethod
    async def _listen(self) -> int:
        """Opens the server on the loop; its port."""

    @abstractmethod
    def stop(self) -> None:
        """Closes the server and stops the loop, also from a failure path or twice."""
