"""A service's router: users' HTTP requests in, handed to the replicas over their WebSockets.

Each replica's host 0 holds one WebSocket to the router (`runtime/replica_protocol.py`).
Requests wait in one FIFO queue and go to the ready replica with the fewest outstanding, at
most twice its batch at a time. A preemption must lose no request: when a replica's socket
closes, whatever it held goes back to the front of the queue, once; a request lost at two
replicas is answered 502. What the lost replica was running predict on waits for its
supervisor's word (`replica_lost`): retried if the cloud took the replica's slice, answered 502
otherwise (it may be what ended the replica) or when no word comes within the queue timeout.
A replica that asks to load a newer checkpoint is let go only while
every other replica is ready and none reloads, so N replicas never have fewer than N-1 ready.
Pure asyncio and aiohttp: a Ray actor elsewhere owns the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import itertools
import json
import logging
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable

from aiohttp import WSCloseCode, WSMessage, WSMsgType, web

from podmanager.core import peer
from podmanager.runtime.replica_protocol import (
    CAUSES,
    INPUTS,
    MAX_BODY_BYTES,
    MAX_FRAME_BYTES,
    REPLICA_PATH,
    Draining,
    Failed,
    Hello,
    Message,
    Reload,
    Request,
    Result,
    Working,
    decode,
    encode,
)
from podmanager.state.services import ReplicaCounters, ServiceCounters

log = logging.getLogger(__name__)

READY = "ready"
DRAINING = "draining"
RELOADING = "reloading"
LATENCY_WINDOW = 1000  # p50/p99 are over this many of the latest 200-responses
BODY_TIMEOUT_S = 30.0  # a body not read in full by then is a 408: a half-sent request holds nothing for long
HEARTBEAT_S = 5.0  # a replica that answers no ping for this long is closed, so its requests move on
SHUTDOWN_TIMEOUT_S = 5.0  # by the time the sites close every request is answered; handlers only return
EXPECTED_BODY = 'a JSON object with an "inputs" field, {"inputs": <any JSON>}'
TOO_DEEP = "the body's JSON is nested too deeply to read; send inputs nested at most a few hundred levels"
LOST_TWICE = ("the request was lost at two replicas in a row (each connection closed before it was answered); "
              "it is not retried again")
LOST_WORKING = ("the replica was lost while running predict on this request; it is not sent to another replica, "
                "in case it is what ended this one")


@dataclass(frozen=True)
class RouterConfig:
    token: str  # the bearer token replicas must present
    slices: tuple[int, ...]  # the replica indices it admits (the service's slices)
    queue_timeout_s: float = 60.0  # how long a request may wait for a ready replica before 503
    retry_after_s: int = 5  # the Retry-After header of a 503
    replicas: int = 1  # the service's replica count: a reload leaves at least replicas-1 ready
    body_timeout_s: float = BODY_TIMEOUT_S  # how long a request's body may take to arrive


@dataclass(frozen=True)
class ReplicaLoss:
    """A replica's supervisor on one of its attempts that ended: whether the cloud took its
    slice (a preemption), so nothing that attempt's predict ran on can be what ended it."""

    run_id: str
    attempt: int
    preempted: bool


class _Verdict(Enum):
    SERVED = "served"  # 200 with the replica's outputs
    FAILED = "failed"  # 502: lost at two replicas, or lost while the replica ran predict on it
    ERRORED = "errored"  # 422 (its inputs) or 500 (a broken replica): predict raised on it
    REJECTED = "rejected"  # 503: no ready replica within the queue timeout
    STOPPED = "stopped"  # 503: the router is stopping


@dataclass(frozen=True)
class _Outcome:
    verdict: _Verdict
    outputs: Any = None
    error: str | None = None  # FAILED, ERRORED: what the user is told
    cause: str = INPUTS  # ERRORED: the request's inputs or the replica


@dataclass(eq=False)
class _Pending:
    """One user's request, from its POST until it is answered."""

    id: int
    frame: str  # its `request` message, encoded once
    answer: asyncio.Future[_Outcome]  # cancelled when the client hangs up
    queued_at: float  # when it last entered the queue: its queue timeout counts from here
    tries: int = 0  # how many replicas it has been sent to


@dataclass(eq=False)
class _Connection:
    """One replica's WebSocket, from its Hello until it closes."""

    ws: web.WebSocketResponse
    hello: Hello
    state: str = READY
    served: int = 0
    outstanding: dict[int, _Pending] = field(default_factory=dict)
    working: set[int] = field(default_factory=set)  # the ids its predict is running on (its last `working`)
    outbox: asyncio.Queue[str | None] = field(default_factory=asyncio.Queue)  # None ends the sender
    lost: bool = False
    reload_wanted: int | None = None  # the step it asked to load, until it is let go

    def has_room(self) -> bool:
        return self.state == READY and len(self.outstanding) < 2 * self.hello.max_batch

    def view(self) -> ReplicaCounters:
        return ReplicaCounters(replica=self.hello.replica, run_id=self.hello.run_id, attempt=self.hello.attempt,
                               state=self.state, outstanding=len(self.outstanding), served=self.served,
                               step=self.hello.step)


class _LatencyWindow:
    """The latest `size` latencies, in ms, and their nearest-rank percentiles."""

    def __init__(self, size: int):
        self._samples: deque[float] = deque(maxlen=size)

    def add(self, ms: float) -> None:
        self._samples.append(ms)

    def percentile(self, percent: float) -> float | None:
        if not self._samples:
            return None
        ordered = sorted(self._samples)
        return ordered[max(1, math.ceil(percent / 100 * len(ordered))) - 1]


class _BadBody(ValueError):
    pass


class Router:
    """Serves POST /predict and GET /healthz to users on one site, and the replicas' WebSocket
    on another. Every method runs on the event loop that serves it; `clock` is monotonic seconds
    and times both the queue timeout and the latencies."""

    def __init__(self, config: RouterConfig, clock: Callable[[], float] = time.monotonic,
                 counted: ServiceCounters | None = None):
        """`counted`: what a router of the same service counted before this one (its record's
        counters, when Ray restarts the actor): the counts carry on from there."""
        self._config = config
        self._clock = clock
        self._ids = itertools.count(1)
        self._queue: deque[_Pending] = deque()
        self._queue_filled = asyncio.Event()  # wakes the expiry task from an empty queue
        self._replicas: dict[int, _Connection] = {}  # by replica index, after their Hello
        # What a lost replica was running predict on, by (run, attempt), until its supervisor's word.
        self._awaiting: dict[tuple[str, int], list[_Pending]] = {}
        self._preempted: deque[tuple[str, int]] = deque(maxlen=64)  # a word that came before the loss
        self._sockets: set[web.WebSocketResponse] = set()  # every open replica socket, Hello or not
        self._tasks: set[asyncio.Task[None]] = set()  # senders and closes, held so they are not collected
        self._latency = _LatencyWindow(LATENCY_WINDOW)
        self._requests = self._served = self._failed = self._rejected = self._errors = 0
        if counted is not None:
            self._requests, self._served, self._failed = counted.requests, counted.served, counted.failed
            self._rejected, self._errors = counted.rejected, counted.errors
        self._stopping = False
        self._runners: list[web.AppRunner] = []

        self._public = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[_owner_only])
        self._public.router.add_post("/predict", self._predict)
        self._public.router.add_get("/healthz", self._healthz)
        self._public.cleanup_ctx.append(self._expiry_task)
        self._replica_side = web.Application(middlewares=[_owner_only])
        self._replica_side.router.add_get(REPLICA_PATH, self._replica_socket)

    # ------------------------------------------------------------------ public surface

    def public_app(self) -> web.Application:
        return self._public

    def replica_app(self) -> web.Application:
        return self._replica_side

    async def start(self, public_host: str, public_port: int, replica_host: str, replica_port: int) -> tuple[int, int]:
        """Serve the public app and the replica app, each on its own site; port 0 picks a free
        port. Returns the two bound ports (public, replica)."""
        if self._runners or self._stopping:
            raise RuntimeError("a router starts once")
        return (await self._serve(self._public, public_host, public_port),
                await self._serve(self._replica_side, replica_host, replica_port))

    async def stop(self) -> None:
        """Answer 503 to every request waiting or at a replica, then close the replicas' sockets
        and both sites. A stopped router stays stopped."""
        if self._stopping:
            return
        self._stopping = True
        for pending in self._queue:
            self._settle(pending, _Outcome(_Verdict.STOPPED))
        self._queue.clear()
        for held in self._awaiting.values():
            for pending in held:
                self._settle(pending, _Outcome(_Verdict.STOPPED))
        self._awaiting.clear()
        for connection in list(self._replicas.values()):
            for pending in connection.outstanding.values():
                self._settle(pending, _Outcome(_Verdict.STOPPED))
            connection.outstanding.clear()
            self._lose(connection)
        await asyncio.gather(*(ws.close(code=WSCloseCode.GOING_AWAY, message=b"router stopping")
                               for ws in list(self._sockets)), return_exceptions=True)
        for runner in self._runners:
            await runner.cleanup()
        self._runners.clear()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def stats(self) -> ServiceCounters:
        """What it counted since it started (`at` and the goodput are its actor's to fill in)."""
        return ServiceCounters(requests=self._requests, served=self._served, failed=self._failed,
                               rejected=self._rejected, errors=self._errors, queued=len(self._queue), p50_ms=self._latency.percentile(50),
                               p99_ms=self._latency.percentile(99), replicas=self._views())

    def set_draining(self, replica: int) -> None:
        """The supervisor saw a preemption notice for this replica's slice: as if it had sent
        Draining. Nothing happens if it is not connected."""
        connection = self._replicas.get(replica)
        if connection is not None:
            self._drain(connection)

    def replica_lost(self, loss: ReplicaLoss) -> None:
        """The supervisor's word on a replica's attempt that ended: what it was running predict
        on is retried if its slice was preempted, else answered 502."""
        key = (loss.run_id, loss.attempt)
        held = self._awaiting.pop(key, None)
        if held is None:
            if loss.preempted:  # the socket has not closed yet (or held nothing)
                self._preempted.append(key)
            return
        log.info("run %s attempt %d: %d request(s) it was running predict on %s", loss.run_id, loss.attempt,
                 len(held), "go back to the queue: its slice was preempted" if loss.preempted else "are answered 502")
        if loss.preempted:
            self._retry(held)
        else:
            for pending in held:
                self._settle(pending, _Outcome(_Verdict.FAILED, error=LOST_WORKING))

    # ------------------------------------------------------------------ users' side

    async def _predict(self, request: web.Request) -> web.Response:
        received_at = self._clock()
        try:
            inputs = _inputs_of(await asyncio.wait_for(request.read(), self._config.body_timeout_s))
        except _BadBody as error:
            return web.json_response({"error": str(error)}, status=400)
        except asyncio.TimeoutError:
            return web.json_response({"error": f"the body did not arrive within {self._config.body_timeout_s:g}s; "
                                               "send it whole"}, status=408, headers={"Connection": "close"})
        if self._stopping:
            return self._unavailable("the router is stopping; retry later")
        request_id = next(self._ids)
        try:
            frame = encode(Request(id=request_id, inputs=inputs))
        except RecursionError:
            return web.json_response({"error": TOO_DEEP}, status=400)
        self._requests += 1
        pending = _Pending(id=request_id, frame=frame, answer=asyncio.get_running_loop().create_future(),
                           queued_at=received_at)
        self._enqueue(pending)
        self._dispatch()
        try:
            outcome = await pending.answer
        finally:
            # A client that hung up cancels this handler (handler_cancellation) and with it the answer.
            if pending.answer.cancelled():
                self._withdraw(pending)
        return self._respond(outcome, received_at)

    def _respond(self, outcome: _Outcome, received_at: float) -> web.Response:
        if outcome.verdict is _Verdict.SERVED:
            try:
                body = json.dumps({"outputs": outcome.outputs}, allow_nan=False)
            except ValueError:  # a replica that let NaN through: JSON has no form for it
                self._errors += 1
                return web.json_response({"error": "predict's output holds NaN or Infinity, which JSON cannot "
                                                   "hold; the program must return finite numbers"}, status=500)
            self._served += 1
            self._latency.add((self._clock() - received_at) * 1000.0)
            return web.json_response(text=body)
        if outcome.verdict is _Verdict.ERRORED:
            self._errors += 1
            status = 422 if outcome.cause == INPUTS else 500
            return web.json_response({"error": f"predict failed on this request: {outcome.error}"}, status=status)
        if outcome.verdict is _Verdict.FAILED:
            self._failed += 1
            return web.json_response({"error": outcome.error or LOST_TWICE}, status=502)
        if outcome.verdict is _Verdict.REJECTED:
            self._rejected += 1
            return self._unavailable(f"no ready replica within {self._config.queue_timeout_s:g}s; retry later")
        return self._unavailable("the router is stopping; retry later")

    def _unavailable(self, message: str) -> web.Response:
        return web.json_response({"error": message}, status=503,
                                 headers={"Retry-After": str(self._config.retry_after_s)})

    async def _healthz(self, request: web.Request) -> web.Response:
        views = self._views()
        ready = sum(view.state == READY for view in views)
        return web.json_response({"ready": ready, "replicas": [view.model_dump() for view in views]},
                                 status=200 if ready else 503)

    # ------------------------------------------------------------------ the queue

    def _enqueue(self, pending: _Pending) -> None:
        pending.queued_at = self._clock()
        self._queue.append(pending)
        self._queue_filled.set()

    def _requeue_first(self, lost: list[_Pending]) -> None:
        """Put requests a replica lost before every newer one, oldest first; their wait starts over."""
        now = self._clock()
        for pending in sorted(lost, key=lambda p: p.id, reverse=True):
            pending.queued_at = now
            self._queue.appendleft(pending)
        self._queue_filled.set()

    def _withdraw(self, pending: _Pending) -> None:
        """Its client is gone: out of the queue. At a replica it stays counted as outstanding (the
        replica is still working on it) and its result is dropped when it comes."""
        with contextlib.suppress(ValueError):
            self._queue.remove(pending)

    def _dispatch(self) -> None:
        """Send queued requests, in order, while some ready replica has room."""
        while self._queue:
            open_replicas = [c for c in self._replicas.values() if c.has_room()]
            if not open_replicas:
                return
            target = min(open_replicas, key=lambda c: (len(c.outstanding), c.served, c.hello.replica))
            pending = self._queue.popleft()
            pending.tries += 1
            target.outstanding[pending.id] = pending
            target.outbox.put_nowait(pending.frame)

    @staticmethod
    def _settle(pending: _Pending, outcome: _Outcome) -> None:
        if not pending.answer.done():
            pending.answer.set_result(outcome)

    async def _expiry_task(self, app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(self._expire_waiting())
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _expire_waiting(self) -> None:
        """Answer 503 to each request that has waited `queue_timeout_s` in the queue. It sleeps
        until the earliest deadline; anything queued meanwhile has a later one, so only an
        empty queue needs waking."""
        timeout = self._config.queue_timeout_s
        while True:
            if not self._queue:
                self._queue_filled.clear()
                await self._queue_filled.wait()
                continue
            now = self._clock()
            for pending in [p for p in self._queue if now - p.queued_at >= timeout]:
                self._queue.remove(pending)
                self._settle(pending, _Outcome(_Verdict.REJECTED))
            if self._queue:
                await asyncio.sleep(min(p.queued_at for p in self._queue) + timeout - now)

    # ------------------------------------------------------------------ replicas' side

    async def _replica_socket(self, request: web.Request) -> web.StreamResponse:
        if not self._authorized(request):
            return web.json_response({"error": "a replica must present Authorization: Bearer <the service's token>"},
                                     status=401)
        if self._stopping:
            return web.json_response({"error": "the router is stopping"}, status=503)
        ws = web.WebSocketResponse(heartbeat=HEARTBEAT_S, max_msg_size=MAX_FRAME_BYTES)
        await ws.prepare(request)
        self._sockets.add(ws)
        connection: _Connection | None = None
        try:
            async for frame in ws:
                try:
                    message = _message_of(frame)
                except ValueError as error:
                    log.warning("closing the replica connection from %s: %s", request.remote, error)
                    break
                if connection is None and isinstance(message, Hello):
                    refusal = self._refusal(message)
                    if refusal is not None:
                        log.warning("refusing a replica connection from %s: %s", request.remote, refusal)
                        await ws.close(code=WSCloseCode.POLICY_VIOLATION, message=refusal.encode()[:120])
                        break
                    connection = self._admit(ws, message)
                elif connection is not None and isinstance(message, Hello) \
                        and message.replica == connection.hello.replica:
                    self._reloaded(connection, message)
                elif connection is not None and isinstance(message, (Result, Failed)):
                    self._resolve(connection, message)
                elif connection is not None and isinstance(message, Working):
                    connection.working = set(message.ids)
                elif connection is not None and isinstance(message, Draining):
                    self._drain(connection)
                elif connection is not None and isinstance(message, Reload):
                    connection.reload_wanted = message.step
                    self._let_one_reload()
                else:
                    log.warning("closing the replica connection from %s: unexpected %s message%s", request.remote,
                                message.type, " before its hello" if connection is None else "")
                    break
        finally:
            self._sockets.discard(ws)
            if connection is not None:
                self._lose(connection)
            await ws.close()
        return ws

    def _authorized(self, request: web.Request) -> bool:
        presented = request.headers.get("Authorization", "").encode()
        return hmac.compare_digest(presented, f"Bearer {self._config.token}".encode())

    def _refusal(self, hello: Hello) -> str | None:
        """Why a hello is refused, if it is: an index that is none of the service's slices, or
        one whose live connection it may not replace. Only a newer attempt of the same run
        replaces a live connection (a restarted replica whose old socket is not closed yet);
        anything else waits until the live one is gone (a replica retries its connection)."""
        if hello.replica not in self._config.slices:
            return f"replica {hello.replica} is not one of this service's replicas {list(self._config.slices)}"
        live = self._replicas.get(hello.replica)
        if live is not None and not (hello.run_id == live.hello.run_id and hello.attempt > live.hello.attempt):
            return (f"replica {hello.replica} is connected (run {live.hello.run_id}, attempt {live.hello.attempt}); "
                    "only a newer attempt of that run replaces it")
        return None

    def _admit(self, ws: web.WebSocketResponse, hello: Hello) -> _Connection:
        older = self._replicas.get(hello.replica)
        if older is not None:
            # A newer attempt of the same run (a restarted host 0): the old socket is as good as gone.
            log.warning("replica %d connected again (run %s, attempt %d); closing its older connection",
                        hello.replica, hello.run_id, hello.attempt)
            self._lose(older)
            self._spawn(older.ws.close(code=WSCloseCode.POLICY_VIOLATION, message=b"replaced by a newer connection"))
        connection = _Connection(ws=ws, hello=hello)
        self._replicas[hello.replica] = connection
        self._spawn(self._send_loop(connection))
        log.info("replica %d ready (run %s, attempt %d, max batch %d, step %s)", hello.replica, hello.run_id,
                 hello.attempt, hello.max_batch, hello.step)
        self._dispatch()
        self._let_one_reload()
        return connection

    def _reloaded(self, connection: _Connection, hello: Hello) -> None:
        """A hello on an open connection: the replica loaded a newer checkpoint and is ready
        again (a draining one stays draining)."""
        connection.hello = hello
        if connection.state == RELOADING:
            connection.state = READY
            log.info("replica %d ready again, serving step %s", hello.replica, hello.step)
        self._dispatch()
        self._let_one_reload()

    def _let_one_reload(self) -> None:
        """Let the lowest replica that asked load its checkpoint, if none is reloading and
        every other replica is ready (so at least replicas-1 stay ready). The grant is said
        after every request already sent to it, which it answers first."""
        connections = list(self._replicas.values())
        if any(c.state == RELOADING for c in connections):
            return
        asking = sorted((c for c in connections if c.state == READY and c.reload_wanted is not None),
                        key=lambda c: c.hello.replica)
        if not asking:
            return
        chosen = asking[0]
        others_ready = sum(c.state == READY for c in connections if c is not chosen)
        if others_ready < self._config.replicas - 1:
            return
        log.info("replica %d may load step %d; %d requests still out", chosen.hello.replica, chosen.reload_wanted,
                 len(chosen.outstanding))
        chosen.state = RELOADING
        chosen.outbox.put_nowait(encode(Reload(step=chosen.reload_wanted)))
        chosen.reload_wanted = None

    def _resolve(self, connection: _Connection, answer: Result | Failed) -> None:
        connection.working.discard(answer.id)
        pending = connection.outstanding.pop(answer.id, None)
        if pending is None:
            return  # not sent on this connection, or it was lost and moved on
        connection.served += 1
        if isinstance(answer, Result):
            outcome = _Outcome(_Verdict.SERVED, answer.outputs)
        else:
            outcome = _Outcome(_Verdict.ERRORED, error=answer.error, cause=answer.cause)
        self._settle(pending, outcome)  # no-op if its client hung up
        self._dispatch()

    def _drain(self, connection: _Connection) -> None:
        if connection.state != DRAINING:
            log.info("replica %d is draining; %d requests still out", connection.hello.replica,
                     len(connection.outstanding))
            connection.state = DRAINING
            # Said back after every request already dispatched to it (one ordered outbox): once
            # the replica has this, nothing more is on its way and it may finish and leave.
            connection.outbox.put_nowait(encode(Draining()))

    def _lose(self, connection: _Connection) -> None:
        """The connection is gone: each request it held goes back to the front of the queue if
        this was its first replica, except what the replica was running predict on, which
        waits for the supervisor's word (`replica_lost`) up to the queue timeout."""
        if connection.lost:
            return
        connection.lost = True
        if self._replicas.get(connection.hello.replica) is connection:
            del self._replicas[connection.hello.replica]
        connection.outbox.put_nowait(None)
        open_ones = [p for p in connection.outstanding.values() if not p.answer.done()]  # else its client hung up
        working = [p for p in open_ones if p.id in connection.working]
        key = (connection.hello.run_id, connection.hello.attempt)
        if working and key in self._preempted:
            working = []  # its slice was preempted: retried with the rest
        elif working:
            self._awaiting.setdefault(key, []).extend(working)
            asyncio.get_running_loop().call_later(self._config.queue_timeout_s, self._no_word, key)
        if connection.outstanding:
            log.warning("replica %d lost with %d requests out; %d wait for its supervisor's word",
                        connection.hello.replica, len(connection.outstanding), len(working))
        connection.outstanding.clear()
        self._retry([p for p in open_ones if p not in working])
        self._let_one_reload()

    def _retry(self, lost: list[_Pending]) -> None:
        """Requests a lost replica held: back to the front of the queue if it was their first
        replica, else answered 502."""
        retries = []
        for pending in lost:
            if pending.tries >= 2:
                self._settle(pending, _Outcome(_Verdict.FAILED, error=LOST_TWICE))
            elif not pending.answer.done():
                retries.append(pending)
        if retries:
            self._requeue_first(retries)
        self._dispatch()

    def _no_word(self, key: tuple[str, int]) -> None:
        """No word from the lost replica's supervisor within the queue timeout: 502, as for a
        request that may have ended it."""
        for pending in self._awaiting.pop(key, []):
            self._settle(pending, _Outcome(_Verdict.FAILED, error=LOST_WORKING))

    async def _send_loop(self, connection: _Connection) -> None:
        """Write the connection's requests in the order they were dispatched."""
        while (text := await connection.outbox.get()) is not None:
            try:
                await connection.ws.send_str(text)
            except (ConnectionError, RuntimeError) as error:
                log.warning("replica %d: sending failed (%s); counting it lost", connection.hello.replica, error)
                self._lose(connection)
                await connection.ws.close()
                return

    # ------------------------------------------------------------------ plumbing

    async def _serve(self, app: web.Application, host: str, port: int) -> int:
        # handler_cancellation: a user who hangs up cancels the handler, which takes the request
        # out of the queue.
        runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
        await runner.setup()
        self._runners.append(runner)
        await web.TCPSite(runner, host, port).start()
        return int(runner.addresses[0][1])

    def _spawn(self, work: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _views(self) -> list[ReplicaCounters]:
        return [self._replicas[index].view() for index in sorted(self._replicas)]


@web.middleware
async def _owner_only(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                      ) -> web.StreamResponse:
    """A connection from this machine is admitted only from the owner's processes (another local
    user gets a 403 saying why, core/peer.py); one from elsewhere is the network's to allow."""
    transport = request.transport
    client = transport.get_extra_info("peername") if transport else None
    server = transport.get_extra_info("sockname") if transport else None
    if client and server and ipaddress.ip_address(client[0].split("%")[0]).is_loopback:
        reason = peer.refusal(client[0], client[1], server=(server[0], server[1]))
        if reason is not None:
            return web.json_response({"error": reason}, status=403)
    return await handler(request)


def _inputs_of(body: bytes) -> Any:
    try:
        data = json.loads(body, parse_constant=_no_constant)
    except RecursionError:
        raise _BadBody(TOO_DEEP) from None
    except _BadBody:
        raise
    except ValueError:
        raise _BadBody(f"the body is not JSON; expected {EXPECTED_BODY}") from None
    if not isinstance(data, dict) or "inputs" not in data:
        raise _BadBody(f'the body has no "inputs" field; expected {EXPECTED_BODY}')
    return data["inputs"]


def _no_constant(name: str) -> Any:
    raise _BadBody(f"the body holds {name}, which JSON has no form for; send finite numbers")


def _message_of(frame: WSMessage) -> Message:
    """The replica message a frame holds; ValueError if it holds none (or a field of the wrong type)."""
    if frame.type is WSMsgType.ERROR:
        raise ValueError(f"the socket failed: {frame.data!r}")
    if frame.type is not WSMsgType.TEXT:
        raise ValueError(f"a {frame.type.name} frame where a text frame was expected")
    message = decode(frame.data)
    if isinstance(message, Hello):
        if not (_is_int(message.replica) and _is_int(message.attempt) and isinstance(message.run_id, str)
                and _is_int(message.max_batch) and message.max_batch >= 1):
            raise ValueError(f"malformed hello: {message}")
        if message.step is not None and not _is_int(message.step):
            raise ValueError(f"malformed hello: step {message.step!r} is not an integer")
    elif isinstance(message, (Result, Failed)) and not _is_int(message.id):
        raise ValueError(f"a {message.type} whose id is not an integer: {message.id!r}")
    elif isinstance(message, Failed) and not (isinstance(message.error, str) and message.cause in CAUSES):
        raise ValueError(f"malformed failed message: {message}")
    elif isinstance(message, Working) and not (isinstance(message.ids, list) and all(map(_is_int, message.ids))):
        raise ValueError(f"a working message whose ids are not integers: {message.ids!r}")
    elif isinstance(message, Reload) and not _is_int(message.step):
        raise ValueError(f"a reload whose step is not an integer: {message.step!r}")
    return message


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
