"""One replica of a service: `serve(predict, warmup=...)` turns a function of a batch into a
replica that the service's router sends requests to.

Every process of the replica (one per host of its slice) calls `serve` with the same
function; the steps below run in lockstep, so `predict` may be a model-parallel forward pass
over all hosts:

1. `predict(warmup)` on every process: the compile happens before the replica says it is
   ready, so the router never sends a request to a cold replica (load the checkpoint before
   calling `serve`).
2. The serving process (host 0 by default) connects to the router (`replica_protocol`) and
   says hello; the router sends it requests, which it batches (at most `max_batch`, waiting at
   most `max_wait_s` after the first).
3. Each batch goes from the serving process to every process (`broadcast_one_to_all`), every
   process runs `predict` on it, and the serving process returns the outputs.
4. A preemption notice (SIGTERM, seen by any process) drains the replica: it tells the router,
   which sends nothing more and says so; the replica answers what it holds and `serve` returns
   `EXIT_PREEMPTED`, so the supervisor replaces the slice as it does for a training run.

The serving process also reports progress about once a second (the loop's iteration), which
is how the supervisor's hang check sees a replica that stopped turning.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import queue
import sys
import threading
import time
from typing import Any, Callable, Sequence

from podmanager.runtime import replica_protocol as protocol
from podmanager.runtime.contract import ENV_ATTEMPT, ENV_RUN_ID, EXIT_PREEMPTED
from podmanager.runtime.preemption import preemption_requested_anywhere
from podmanager.runtime.progress import report_progress

log = logging.getLogger(__name__)

IDLE_WAIT_S = 0.05  # how long an idle loop waits for a first request before turning again
REPORT_EVERY_S = 1.0
RECONNECT_S = (0.2, 5.0)  # first and longest pause between tries to reach the router


class ServeConfigError(RuntimeError):
    """The process was not started as a replica of a service."""


def serve(predict: Callable[[list[Any]], Sequence[Any]], *, warmup: Sequence[Any], max_batch: int = 8,
          max_wait_s: float = 0.005, serving_process: int = 0) -> int:
    """Serve `predict` (inputs of a batch -> their outputs, in order) as this replica until a
    preemption notice; return the exit code to leave with (`EXIT_PREEMPTED`).

    `warmup`: example inputs, run once before the replica is ready. Inputs and outputs are
    what JSON holds (outputs may also be NumPy arrays or scalars, sent as lists and numbers).
    """
    if max_batch < 1:
        raise ValueError(f"max_batch={max_batch} must be at least 1")
    if not warmup:
        raise ValueError("warmup: give at least one example input (it compiles the model before serving)")
    _check_outputs(list(warmup), predict(list(warmup)))
    process = _process_index()
    link = _RouterLink.from_environment(max_batch) if process == serving_process else None
    lockstep = _Lockstep(serving_process)
    iteration, reported_at, draining = 0, 0.0, False
    try:
        if link is not None:
            link.start()
        while True:
            batch = link.take_batch(max_batch, max_wait_s) if link is not None else []
            if preemption_requested_anywhere() and not draining:
                draining = True  # every process sees the same answer at the same iteration
                if link is not None:
                    link.drain()
            done = draining and link is not None and link.drained() and not batch
            payload = json.dumps([inputs for _, inputs in batch]).encode() if batch else b""
            payload, done = lockstep.share(payload, done)
            if payload:
                inputs = json.loads(payload)
                outputs = _check_outputs(inputs, predict(inputs))
                if link is not None:
                    link.answer([(request_id, output) for (request_id, _), output in zip(batch, outputs)])
            iteration += 1
            if time.monotonic() - reported_at >= REPORT_EVERY_S:
                report_progress(iteration)
                reported_at = time.monotonic()
            if done:
                return EXIT_PREEMPTED
    finally:
        if link is not None:
            link.close()


def _process_index() -> int:
    jax = sys.modules.get("jax")
    if jax is not None and jax.distributed.is_initialized():
        return jax.process_index()
    return 0


def _check_outputs(inputs: list[Any], outputs: Sequence[Any]) -> list[Any]:
    outputs = [_plain(o) for o in outputs]
    if len(outputs) != len(inputs):
        raise ValueError(f"predict returned {len(outputs)} outputs for {len(inputs)} inputs; return one per input")
    return outputs


def _plain(value: Any) -> Any:
    """A NumPy (or JAX) array or scalar as the lists and numbers JSON holds."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


class _Lockstep:
    """Hands the serving process's batch (bytes) and its `done` to every process of the job.
    Payloads are padded to a power of two so the broadcast compiles for a few sizes only."""

    def __init__(self, source: int) -> None:
        self.source = source
        jax = sys.modules.get("jax")
        self.distributed = jax is not None and jax.distributed.is_initialized() and jax.process_count() > 1

    def share(self, payload: bytes, done: bool) -> tuple[bytes, bool]:
        if not self.distributed:
            return payload, done
        import jax
        import numpy as np
        from jax.experimental import multihost_utils

        is_source = jax.process_index() == self.source
        header = np.array([len(payload), int(done)], np.int64)
        header = multihost_utils.broadcast_one_to_all(header, is_source=is_source)
        size, done = int(header[0]), bool(header[1])
        if size == 0:
            return b"", done
        padded = max(1024, 1 << (size - 1).bit_length())
        buffer = np.zeros(padded, np.uint8)
        if is_source:
            buffer[:size] = np.frombuffer(payload, np.uint8)
        buffer = multihost_utils.broadcast_one_to_all(buffer, is_source=is_source)
        return np.asarray(buffer[:size]).tobytes(), done


class _RouterLink:
    """The serving process's connection to the router, run by an asyncio loop in a thread of
    its own: requests land in `inbox`, results and the drain go out through the loop. A lost
    connection is made again (and hello said again); requests of a lost connection are
    dropped, since the router has sent them to another replica."""

    def __init__(self, url: str, token: str, hello: protocol.Hello) -> None:
        self.url, self.token, self.hello = url, token, hello
        self.inbox: queue.Queue[tuple[int, int, Any]] = queue.Queue()  # (connection, request id, inputs)
        self._connection = 0  # which connection is current; requests of older ones are stale
        self._loop = asyncio.new_event_loop()
        self._socket: Any = None
        self._draining = False
        self._drained = threading.Event()  # the router confirmed: nothing more will come
        self._closing = False
        self._fatal: ServeConfigError | None = None  # the router refused us: no use trying again
        self._thread = threading.Thread(target=self._loop.run_forever, name="replica-router-link", daemon=True)

    @classmethod
    def from_environment(cls, max_batch: int) -> _RouterLink:
        env = os.environ
        missing = [name for name in (protocol.ENV_SERVE_URL, protocol.ENV_SERVE_TOKEN, protocol.ENV_REPLICA)
                   if not env.get(name)]
        if missing:
            raise ServeConfigError(f"runtime.serve: {', '.join(missing)} not set; start the program with "
                                   "'podmanager serve', which makes each slice a replica of a service")
        hello = protocol.Hello(replica=int(env[protocol.ENV_REPLICA]), run_id=env.get(ENV_RUN_ID, ""),
                               attempt=int(env.get(ENV_ATTEMPT, "0") or 0), max_batch=max_batch)
        return cls(env[protocol.ENV_SERVE_URL], env[protocol.ENV_SERVE_TOKEN], hello)

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._keep_connected(), self._loop)

    def take_batch(self, max_batch: int, max_wait_s: float) -> list[tuple[int, Any]]:
        """Up to `max_batch` requests of the current connection: waits up to IDLE_WAIT_S for a
        first one, then up to `max_wait_s` for more."""
        if self._fatal is not None:
            raise self._fatal
        batch: list[tuple[int, Any]] = []
        deadline = None
        while len(batch) < max_batch:
            wait = IDLE_WAIT_S if deadline is None else deadline - time.monotonic()
            try:
                connection, request_id, inputs = self.inbox.get(timeout=max(wait, 0.0)) if wait > 0 \
                    else self.inbox.get_nowait()
            except queue.Empty:
                break
            if connection != self._connection:
                continue
            batch.append((request_id, inputs))
            if deadline is None:
                deadline = time.monotonic() + max_wait_s
        return batch

    def answer(self, results: list[tuple[int, Any]]) -> None:
        frames = [protocol.encode(protocol.Result(id=request_id, outputs=outputs)) for request_id, outputs in results]
        asyncio.run_coroutine_threadsafe(self._send(frames), self._loop).result()

    def drain(self) -> None:
        """Ask the router to send nothing more; `drained()` once it confirmed (or is gone)."""
        self._draining = True
        asyncio.run_coroutine_threadsafe(self._send([protocol.encode(protocol.Draining())]), self._loop).result()

    def drained(self) -> bool:
        return self._drained.is_set() and self.inbox.empty()

    def close(self) -> None:
        self._closing = True

        async def shut() -> None:
            if self._socket is not None:
                await self._socket.close()

        if self._thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(shut(), self._loop).result(timeout=5)
            except Exception:  # noqa: BLE001 - leaving anyway
                pass
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)

    async def _send(self, frames: list[str]) -> None:
        if self._socket is None or self._socket.closed:
            return  # the router has these requests retried elsewhere
        for frame in frames:
            await self._socket.send_str(frame)

    async def _keep_connected(self) -> None:
        import aiohttp

        pause = RECONNECT_S[0]
        async with aiohttp.ClientSession() as session:
            while not self._closing:
                try:
                    async with session.ws_connect(self.url, heartbeat=5.0,
                                                  headers={"Authorization": f"Bearer {self.token}"}) as socket:
                        self._connection += 1
                        self._socket = socket
                        await socket.send_str(protocol.encode(self.hello))
                        if self._draining:
                            await socket.send_str(protocol.encode(protocol.Draining()))
                        pause = RECONNECT_S[0]
                        await self._receive(socket)
                except aiohttp.WSServerHandshakeError as error:
                    if error.status in (401, 403):
                        self._fatal = ServeConfigError(f"the router refused this replica ({error.status}): "
                                                       f"{protocol.ENV_SERVE_TOKEN} is not the service's token")
                        return
                    log.warning("cannot reach the router at %s: %s", self.url, error)
                except (aiohttp.ClientError, OSError) as error:
                    log.warning("cannot reach the router at %s: %s", self.url, error)
                self._socket = None
                if self._draining:
                    self._drained.set()  # no router to send anything more
                if not self._closing:
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, RECONNECT_S[1])

    async def _receive(self, socket: Any) -> None:
        import aiohttp

        async for frame in socket:
            if frame.type != aiohttp.WSMsgType.TEXT:
                break
            message = protocol.decode(frame.data)
            if isinstance(message, protocol.Request):
                self.inbox.put((self._connection, message.id, message.inputs))
            elif isinstance(message, protocol.Draining):
                self._drained.set()
