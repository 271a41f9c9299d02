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
   process runs `predict` on it, and the serving process returns the outputs. When `predict`
   raises (on any process: they agree on it), each request of the batch is run again alone,
   in lockstep too, and the ones it raises on are answered with the error (422): one bad
   request does not end the replica. Only when the warmup inputs fail too does `serve` raise
   (`ReplicaBroken`), so the supervisor replaces a replica that can no longer serve.
4. A preemption notice (SIGTERM, seen by any process) drains the replica: it tells the router,
   which sends nothing more and says so; the replica answers what it holds and `serve` returns
   `EXIT_PREEMPTED`, so the supervisor replaces the slice as it does for a training run.

5. With `podmanager serve --follow-checkpoints`, the serving process watches the checkpoint
   dir; for a newer complete step it asks the router, which lets one replica at a time go
   (`replica_protocol.Reload`). The replica answers what it holds, every process calls
   `reload(step)` in lockstep and runs the warmup again, and it says hello with the new step.

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
import traceback
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from podmanager.runtime import replica_protocol as protocol
from podmanager.runtime.contract import (
    ENV_ATTEMPT,
    ENV_CHECKPOINT_DIR,
    ENV_RUN_ID,
    EXIT_PREEMPTED,
)
from podmanager.runtime.preemption import preemption_requested_anywhere
from podmanager.runtime.progress import _process_index, report_progress

log = logging.getLogger(__name__)

IDLE_WAIT_S = 0.05  # how long an idle loop waits for a first request before turning again
REPORT_EVERY_S = 1.0
RECONNECT_S = (0.1, 1.0)  # first and longest pause between tries to reach the router (a restarted one is back in ~1 s)
FOLLOW_EVERY_S = 1.0  # how often a replica that follows checkpoints looks for a newer one
MAX_ERROR_CHARS = 1000  # of an error said to a user

Predict = Callable[[list[Any]], Sequence[Any]]


class ServeConfigError(RuntimeError):
    """The process was not started as a replica of a service."""


def serve(predict: Predict, *, warmup: Sequence[Any], max_batch: int = 8, max_wait_s: float = 0.005,
          serving_process: int = 0, step: int | None = None, reload: Callable[[int], Predict] | None = None) -> int:
    """Serve `predict` (inputs of a batch -> their outputs, in order) as this replica until a
    preemption notice; return the exit code to leave with (`EXIT_PREEMPTED`).

    `warmup`: example inputs, run once before the replica is ready (and after each reload).
    Inputs and outputs are what JSON holds (outputs may also be NumPy arrays or scalars, sent
    as lists and numbers). `step`: the checkpoint `predict` serves (`runs` shows it).
    `reload(step)`: the predict function of checkpoint `step`, for `serve --follow-checkpoints`.
    """
    if max_batch < 1:
        raise ValueError(f"max_batch={max_batch} must be at least 1")
    if not warmup:
        raise ValueError("warmup: give at least one example input (it compiles the model before serving)")
    follow = os.environ.get(protocol.ENV_FOLLOW_CHECKPOINTS) == "1"
    if follow and reload is None:
        raise ServeConfigError("serve --follow-checkpoints: this program passes no reload= to runtime.serve, so it "
                               "cannot load a newer checkpoint; serve without the flag or give reload=")
    _check_outputs(list(warmup), predict(list(warmup)))
    lockstep = _Lockstep(serving_process)
    lockstep.any_failed(False)  # compiles the agreement before the first request needs it
    process = _process_index()
    link = _RouterLink.from_environment(max_batch, step) if process == serving_process else None
    watch = _CheckpointWatch.from_environment() if follow and link is not None else None
    iteration, reported_at, draining = 0, 0.0, False
    try:
        if link is not None:
            link.start()
        if watch is not None:
            watch.start()
        while True:
            batch = link.take_batch(max_batch, max_wait_s) if link is not None else []
            if preemption_requested_anywhere() and not draining:
                draining = True  # every process sees the same answer at the same iteration
                if link is not None:
                    link.drain()
            if watch is not None and not draining and (newer := watch.newer_than(step)) is not None:
                link.ask_reload(newer)
            done = draining and link is not None and link.drained() and not batch
            reload_to = link.reload_due() if link is not None and not draining and not batch else None
            payload = json.dumps([inputs for _, inputs in batch]).encode() if batch else b""
            payload, done, reload_to = lockstep.share(payload, done, reload_to)
            if payload:
                inputs = json.loads(payload)
                if link is not None:
                    link.working([request_id for request_id, _ in batch])
                answers = _answer_batch(predict, inputs, warmup, lockstep)
                if link is not None:
                    link.answer([(request_id, answer) for (request_id, _), answer in zip(batch, answers)])
                if any(answer.cause == protocol.REPLICA for answer in answers):
                    raise ReplicaBroken(answers[0].error or "")
            if reload_to is not None and not done:
                predict, step = reload(reload_to), reload_to
                _check_outputs(list(warmup), predict(list(warmup)))
                if link is not None:
                    link.reloaded(step)
            iteration += 1
            if time.monotonic() - reported_at >= REPORT_EVERY_S:
                report_progress(iteration)
                reported_at = time.monotonic()
            if done:
                return EXIT_PREEMPTED
    finally:
        if watch is not None:
            watch.stop()
        if link is not None:
            link.close()


class ReplicaBroken(RuntimeError):
    """`predict` fails on the warmup inputs too: the replica, not a request, is at fault, so
    it ends (and its supervisor replaces it) instead of answering every request with an error."""


@dataclass(frozen=True)
class _Answer:
    """One request's answer: its output, or why `predict` could not give one."""

    output: Any = None
    error: str | None = None
    cause: str = protocol.INPUTS  # of an error


def _answer_batch(predict: Predict, inputs: list[Any], warmup: Sequence[Any], lockstep: _Lockstep) -> list[_Answer]:
    """Each input's answer. When `predict` raises on the batch (on any process), each input is
    run again alone, so only the inputs it fails on are answered with its error; if it fails
    on every one, the warmup inputs tell whether the replica itself is broken. Every process
    makes the same calls in the same order (each outcome is agreed by all), so a
    model-parallel `predict` stays in lockstep."""
    outputs, error = _try_predict(predict, inputs)
    if not lockstep.any_failed(error is not None):
        return [_Answer(output) for output in outputs]
    if len(inputs) == 1:
        answers = [_Answer(error=_describe(error))]
    else:
        answers = []
        for one in inputs:
            output, error_alone = _try_predict(predict, [one])
            failed = lockstep.any_failed(error_alone is not None)
            answers.append(_Answer(error=_describe(error_alone)) if failed else _Answer(output[0]))
    if all(answer.error is not None for answer in answers):
        _, warm_error = _try_predict(predict, list(warmup))
        if lockstep.any_failed(warm_error is not None):
            why = f"predict fails on the warmup inputs too ({_describe(warm_error)}): the replica is broken"
            return [_Answer(error=why, cause=protocol.REPLICA) for _ in inputs]
    return answers


def _try_predict(predict: Predict, inputs: list[Any]) -> tuple[list[Any], BaseException | None]:
    """`predict`'s checked outputs, or the exception it raised (printed to the run's log)."""
    try:
        return _check_outputs(inputs, predict(inputs)), None
    except Exception as error:  # noqa: BLE001 - the user's code: any error is this batch's answer
        print(f"podmanager: predict raised on a batch of {len(inputs)}:", file=sys.stderr)
        traceback.print_exception(error, file=sys.stderr)
        return [], error


def _describe(error: BaseException | None) -> str:
    if error is None:  # it raised on another process of the replica
        return "predict raised on another host of this replica (see the run's logs)"
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS] + "..."


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


def _frame(request_id: int, answer: _Answer) -> str:
    """The answer's frame; an output JSON cannot hold (NaN, Infinity, an object) is the
    request's error instead (500: the program's fault), never invalid JSON."""
    if answer.error is not None:
        return protocol.encode(protocol.Failed(id=request_id, error=answer.error, cause=answer.cause))
    try:
        return protocol.encode(protocol.Result(id=request_id, outputs=answer.output))
    except (ValueError, TypeError, RecursionError) as error:
        why = (f"its output cannot be sent as JSON ({error}): return numbers, strings, lists and dicts, without "
               "NaN or Infinity")
        return protocol.encode(protocol.Failed(id=request_id, error=why, cause=protocol.REPLICA))  # the program's fault


class _CheckpointWatch:
    """The newest complete step in the checkpoint dir, looked up by a thread of the serving
    process about once a second (a listing of remote storage must not hold up serving)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.latest: int | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._look, name="replica-checkpoint-watch", daemon=True)

    @classmethod
    def from_environment(cls) -> _CheckpointWatch:
        directory = os.environ.get(ENV_CHECKPOINT_DIR)
        if not directory:
            raise ServeConfigError(f"serve --follow-checkpoints: {ENV_CHECKPOINT_DIR} is not set; give the service "
                                   "--checkpoint-dir DIR (the training run's)")
        return cls(directory)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=5)

    def newer_than(self, step: int | None) -> int | None:
        latest = self.latest
        return latest if latest is not None and (step is None or latest > step) else None

    def _look(self) -> None:
        from podmanager.runtime.checkpoints import latest_complete_step

        while not self._stopping.is_set():
            try:
                self.latest = latest_complete_step(self.directory)
            except Exception as error:  # noqa: BLE001 - storage hiccups: the replica serves on
                log.warning("cannot list checkpoints in %s: %s", self.directory, error)
            self._stopping.wait(FOLLOW_EVERY_S)


class _Lockstep:
    """Hands the serving process's batch (bytes), its `done` and the step to reload (if any) to
    every process of the job. Payloads are padded to a power of two so the broadcast compiles
    for a few sizes only."""

    def __init__(self, source: int) -> None:
        self.source = source
        jax = sys.modules.get("jax")
        self.distributed = jax is not None and jax.distributed.is_initialized() and jax.process_count() > 1

    def any_failed(self, failed: bool) -> bool:
        """Whether any process failed (each says whether it did): every process gets the same answer."""
        if not self.distributed:
            return failed
        import numpy as np
        from jax.experimental import multihost_utils

        return bool(np.asarray(multihost_utils.process_allgather(np.array([int(failed)], np.int32))).any())

    def share(self, payload: bytes, done: bool, reload_to: int | None) -> tuple[bytes, bool, int | None]:
        if not self.distributed:
            return payload, done, reload_to
        import jax
        import numpy as np
        from jax.experimental import multihost_utils

        is_source = jax.process_index() == self.source
        header = np.array([len(payload), int(done), -1 if reload_to is None else reload_to], np.int64)
        header = multihost_utils.broadcast_one_to_all(header, is_source=is_source)
        size, done, reload_to = int(header[0]), bool(header[1]), (None if header[2] < 0 else int(header[2]))
        if size == 0:
            return b"", done, reload_to
        padded = max(1024, 1 << (size - 1).bit_length())
        buffer = np.zeros(padded, np.uint8)
        if is_source:
            buffer[:size] = np.frombuffer(payload, np.uint8)
        buffer = multihost_utils.broadcast_one_to_all(buffer, is_source=is_source)
        return np.asarray(buffer[:size]).tobytes(), done, reload_to


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
        self._reload_asked: int | None = None  # the step asked for, until it is granted
        self._reload_granted: int | None = None  # set by the receiving thread after every request before it
        self._thread = threading.Thread(target=self._loop.run_forever, name="replica-router-link", daemon=True)

    @classmethod
    def from_environment(cls, max_batch: int, step: int | None) -> _RouterLink:
        env = os.environ
        missing = [name for name in (protocol.ENV_SERVE_URL, protocol.ENV_SERVE_TOKEN, protocol.ENV_REPLICA)
                   if not env.get(name)]
        if missing:
            raise ServeConfigError(f"runtime.serve: {', '.join(missing)} not set; start the program with "
                                   "'podmanager serve', which makes each slice a replica of a service")
        hello = protocol.Hello(replica=int(env[protocol.ENV_REPLICA]), run_id=env.get(ENV_RUN_ID, ""),
                               attempt=int(env.get(ENV_ATTEMPT, "0") or 0), max_batch=max_batch, step=step)
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

    def working(self, request_ids: list[int]) -> None:
        """Tell the router which requests `predict` is about to run on."""
        frame = protocol.encode(protocol.Working(ids=request_ids))
        asyncio.run_coroutine_threadsafe(self._send([frame]), self._loop).result()

    def answer(self, answers: list[tuple[int, _Answer]]) -> None:
        frames = [_frame(request_id, answer) for request_id, answer in answers]
        asyncio.run_coroutine_threadsafe(self._send(frames), self._loop).result()

    def drain(self) -> None:
        """Ask the router to send nothing more; `drained()` once it confirmed (or is gone)."""
        self._draining = True
        asyncio.run_coroutine_threadsafe(self._send([protocol.encode(protocol.Draining())]), self._loop).result()

    def drained(self) -> bool:
        return self._drained.is_set() and self.inbox.empty()

    def ask_reload(self, step: int) -> None:
        """Ask the router to let this replica load checkpoint `step` (once per step)."""
        if step != self._reload_asked and self._reload_granted is None:
            self._reload_asked = step
            asyncio.run_coroutine_threadsafe(self._send([protocol.encode(protocol.Reload(step=step))]),
                                             self._loop).result()

    def reload_due(self) -> int | None:
        """The step the router let this replica load, once every request sent before is taken."""
        granted = self._reload_granted
        if granted is None or not self.inbox.empty():
            return None
        self._reload_granted = self._reload_asked = None
        return granted

    def reloaded(self, step: int) -> None:
        """Ready again, serving `step`: hello on the same connection."""
        self.hello = replace(self.hello, step=step)
        asyncio.run_coroutine_threadsafe(self._send([protocol.encode(self.hello)]), self._loop).result()

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
                    async with session.ws_connect(self.url, heartbeat=5.0, max_msg_size=protocol.MAX_FRAME_BYTES,
                                                  headers={"Authorization": f"Bearer {self.token}"}) as socket:
                        self._connection += 1
                        self._socket = socket
                        await socket.send_str(protocol.encode(self.hello))
                        if self._draining:
                            await socket.send_str(protocol.encode(protocol.Draining()))
                        elif self._reload_asked is not None and self._reload_granted is None:
                            await socket.send_str(protocol.encode(protocol.Reload(step=self._reload_asked)))
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
            elif isinstance(message, protocol.Reload):
                self._reload_granted = message.step
