"""serving/router.py: the router on real sockets (127.0.0.1), with fake replicas that are
aiohttp WebSocket clients answering `{"value": inputs * 2, "replica": <index>}`.

Each test runs its own event loop (`asyncio.run`); router, replicas and users share it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest

from podmanager.runtime.replica_protocol import (
    MAX_BODY_BYTES,
    REPLICA_PATH,
    Draining,
    Failed,
    Hello,
    Reload,
    Request,
    Result,
    Working,
    decode,
    encode,
)
from podmanager.serving.router import ReplicaLoss, Router, RouterConfig
from podmanager.state.services import ServiceCounters

TOKEN = "s3cret"
SLICES = (0, 1, 2, 3)  # the replica indices the router admits
WAIT_S = 5.0  # the longest any test waits for a condition before failing


@dataclass
class Service:
    router: Router
    session: aiohttp.ClientSession
    public_url: str
    replica_url: str

    async def predict(self, inputs: Any, timeout_s: float = 10.0) -> tuple[int, dict[str, Any], Any]:
        """(status, JSON body, headers) of one POST /predict."""
        async with self.session.post(f"{self.public_url}/predict", json={"inputs": inputs},
                                     timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
            return response.status, await response.json(), response.headers

    def predict_later(self, inputs: Any) -> asyncio.Task[tuple[int, dict[str, Any], Any]]:
        return asyncio.create_task(self.predict(inputs))

    async def replica(self, index: int, **options: Any) -> FakeReplica:
        replica = FakeReplica(index=index, **options)
        await replica.connect(self.session, self.replica_url)
        return replica


@contextlib.asynccontextmanager
async def running(queue_timeout_s: float = 10.0, retry_after_s: int = 5, replicas: int = 1,
                  body_timeout_s: float = 30.0, counted: ServiceCounters | None = None) -> AsyncIterator[Service]:
    router = Router(RouterConfig(token=TOKEN, slices=SLICES, queue_timeout_s=queue_timeout_s,
                                 retry_after_s=retry_after_s, replicas=replicas, body_timeout_s=body_timeout_s),
                    counted=counted)
    public_port, replica_port = await router.start("127.0.0.1", 0, "127.0.0.1", 0)
    async with aiohttp.ClientSession() as session:
        try:
            yield Service(router, session, f"http://127.0.0.1:{public_port}",
                          f"ws://127.0.0.1:{replica_port}{REPLICA_PATH}")
        finally:
            await router.stop()


@dataclass(eq=False)
class FakeReplica:
    """A replica's host 0: says hello, answers each request after `delay_s`, or holds every
    answer until `release` is set when `held`."""

    index: int
    max_batch: int = 4
    attempt: int = 1
    delay_s: float = 0.0
    held: bool = False
    received: list[int] = field(default_factory=list)  # request ids, in arrival order
    granted: list[int] = field(default_factory=list)  # steps the router let it load
    said: list[str] = field(default_factory=list)  # every message's type, in arrival order
    in_flight: int = 0
    max_in_flight: int = 0
    release: asyncio.Event = field(default_factory=asyncio.Event)
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    ws: aiohttp.ClientWebSocketResponse | None = None
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def connect(self, session: aiohttp.ClientSession, url: str) -> None:
        self.ws = await session.ws_connect(url, headers={"Authorization": f"Bearer {TOKEN}"})
        await self.ws.send_str(encode(Hello(replica=self.index, run_id="run-1", attempt=self.attempt,
                                            max_batch=self.max_batch)))
        self.tasks.add(asyncio.create_task(self._serve()))

    async def _serve(self) -> None:
        assert self.ws is not None
        async for frame in self.ws:
            if frame.type is not aiohttp.WSMsgType.TEXT:
                break
            request = decode(frame.data)
            self.said.append(request.type)
            if isinstance(request, Reload):
                self.granted.append(request.step)
            if not isinstance(request, Request):
                async with self.changed:
                    self.changed.notify_all()
                continue
            self.received.append(request.id)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            task = asyncio.create_task(self._answer(request))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
            async with self.changed:
                self.changed.notify_all()
        self.closed.set()

    async def _answer(self, request: Request) -> None:
        if self.held:
            await self.release.wait()
        await asyncio.sleep(self.delay_s)
        self.in_flight -= 1
        if self.ws is not None and not self.ws.closed:
            await self.ws.send_str(encode(Result(id=request.id, outputs={"value": request.inputs * 2,
                                                                         "replica": self.index})))

    async def wait_received(self, count: int) -> None:
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(lambda: len(self.received) >= count), WAIT_S)

    async def hello(self, step: int) -> None:
        """Ready again after loading checkpoint `step`."""
        await self.send(encode(Hello(replica=self.index, run_id="run-1", attempt=self.attempt,
                                     max_batch=self.max_batch, step=step)))

    async def send(self, text: str) -> None:
        assert self.ws is not None
        await self.ws.send_str(text)

    async def close(self) -> None:
        assert self.ws is not None
        await self.ws.close()
        await asyncio.wait_for(self.closed.wait(), WAIT_S)


async def eventually(condition: Callable[[], bool], what: str) -> None:
    """The router sends no notice when its state changes, so its stats are polled, with a deadline."""
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


def connected(router: Router, count: int, state: str = "ready") -> Callable[[], bool]:
    return lambda: sum(view.state == state for view in router.stats().replicas) == count


def queued(router: Router, count: int) -> Callable[[], bool]:
    return lambda: router.stats().queued == count


def test_two_replicas_share_forty_concurrent_requests():
    async def scenario() -> ServiceCounters:
        async with running() as service:
            first = await service.replica(0, max_batch=2, delay_s=0.01)
            second = await service.replica(1, max_batch=2, delay_s=0.01)
            await eventually(connected(service.router, 2), "two ready replicas")
            answers = await asyncio.gather(*(service.predict(n) for n in range(40)))
            assert [status for status, _, _ in answers] == [200] * 40
            assert [body["outputs"]["value"] for _, body, _ in answers] == [2 * n for n in range(40)]
            by_replica = [body["outputs"]["replica"] for _, body, _ in answers]
            assert by_replica.count(0) == len(first.received) > 0
            assert by_replica.count(1) == len(second.received) > 0
            # Never more than twice a replica's batch at it at once.
            assert first.max_in_flight <= 4 and second.max_in_flight <= 4
            return service.router.stats()

    stats = asyncio.run(scenario())
    assert (stats.requests, stats.served, stats.failed, stats.rejected, stats.queued) == (40, 40, 0, 0, 0)
    assert stats.p50_ms is not None and stats.p99_ms is not None and 0 < stats.p50_ms <= stats.p99_ms
    assert ServiceCounters.model_validate_json(stats.model_dump_json()) == stats  # as the record stores it


def test_dispatch_goes_to_the_fewest_outstanding_then_the_fewest_served():
    async def scenario() -> None:
        async with running() as service:
            first = await service.replica(0)
            second = await service.replica(1)
            await eventually(connected(service.router, 2), "two ready replicas")
            # One at a time nothing is outstanding anywhere: the one that served fewer takes the next.
            one_by_one = [(await service.predict(n))[1]["outputs"]["replica"] for n in range(4)]
            assert one_by_one == [0, 1, 0, 1]
            # Held, each new request goes where fewer are outstanding.
            first.held = second.held = True
            held = []
            for n in range(4):
                held.append(service.predict_later(n))
                await eventually(lambda: len(first.received) + len(second.received) == 5 + n, f"request {n} sent")
                assert abs(len(first.received) - len(second.received)) <= 1
            first.release.set()
            second.release.set()
            assert [status for status, _, _ in await asyncio.gather(*held)] == [200] * 4
            assert len(first.received) == len(second.received) == 4

    asyncio.run(scenario())


def test_a_requeued_request_waits_its_queue_timeout_afresh():
    async def scenario() -> None:
        async with running(queue_timeout_s=0.3) as service:
            lost = await service.replica(0, held=True)
            await eventually(connected(service.router, 1), "replica 0 ready")
            answer = service.predict_later(5)
            await lost.wait_received(1)
            await asyncio.sleep(0.4)  # held at the replica longer than the queue timeout
            await lost.close()
            await service.replica(1)
            status, body, _ = await answer
            assert (status, body["outputs"]) == (200, {"value": 10, "replica": 1})

    asyncio.run(scenario())


@pytest.mark.parametrize("how", ["message", "set_draining"])
def test_a_draining_replica_finishes_what_it_holds_and_gets_nothing_new(how):
    async def scenario() -> None:
        async with running() as service:
            draining = await service.replica(0, held=True)
            await eventually(connected(service.router, 1), "replica 0 ready")
            held = [service.predict_later(n) for n in range(3)]
            await draining.wait_received(3)
            if how == "message":
                await draining.send(encode(Draining()))
            else:
                service.router.set_draining(0)
            await eventually(connected(service.router, 1, state="draining"), "replica 0 draining")
            taker = await service.replica(1)
            await eventually(connected(service.router, 1), "replica 1 ready")
            rest = await asyncio.gather(*(service.predict(n) for n in range(3, 13)))
            assert {body["outputs"]["replica"] for _, body, _ in rest} == {1}
            draining.release.set()
            first = await asyncio.gather(*held)
            assert [(status, body["outputs"]) for status, body, _ in first] == \
                [(200, {"value": 2 * n, "replica": 0}) for n in range(3)]
            assert len(draining.received) == 3 and len(taker.received) == 10
            stats = service.router.stats()
            assert (stats.served, stats.failed) == (13, 0)

    asyncio.run(scenario())


@pytest.mark.parametrize("how", ["close", "malformed frame"])
def test_requests_at_a_lost_replica_are_retried_first_on_another(how):
    async def scenario() -> None:
        async with running() as service:
            lost = await service.replica(0, max_batch=1, held=True)
            await eventually(connected(service.router, 1), "replica 0 ready")
            answers = [service.predict_later(n) for n in range(2)]
            await lost.wait_received(2)
            newer = service.predict_later(2)  # replica 0 is full: this one waits in the queue
            await eventually(queued(service.router, 1), "the third request queued")
            if how == "close":
                await lost.close()
            else:
                await lost.send("{not json")
                await asyncio.wait_for(lost.closed.wait(), WAIT_S)  # the router closed it
            await eventually(queued(service.router, 3), "the lost requests queued again")
            assert service.router.stats().replicas == []
            taker = await service.replica(1)
            results = await asyncio.gather(*answers, newer)
            assert [(status, body["outputs"]) for status, body, _ in results] == \
                [(200, {"value": 2 * n, "replica": 1}) for n in range(3)]
            # The retried requests went out before the newer one, under their own ids.
            assert taker.received[:2] == lost.received and len(taker.received) == 3
            stats = service.router.stats()
            assert (stats.requests, stats.served, stats.failed) == (3, 3, 0)

    asyncio.run(scenario())


def test_a_request_lost_at_two_replicas_is_answered_502():
    async def scenario() -> None:
        async with running() as service:
            first = await service.replica(0, held=True)
            await eventually(connected(service.router, 1), "replica 0 ready")
            answer = service.predict_later(7)
            await first.wait_received(1)
            second = await service.replica(1, held=True)
            await eventually(connected(service.router, 2), "replica 1 ready")
            await first.close()
            await second.wait_received(1)
            assert second.received == first.received
            await second.close()
            status, body, _ = await answer
            assert status == 502 and "lost" in body["error"]
            stats = service.router.stats()
            assert (stats.requests, stats.served, stats.failed, stats.queued) == (1, 0, 1, 0)

    asyncio.run(scenario())


def test_with_no_ready_replica_a_request_is_rejected_only_after_the_queue_timeout():
    async def scenario() -> None:
        async with running(queue_timeout_s=0.3, retry_after_s=7) as service:
            started = time.monotonic()
            status, body, headers = await service.predict(1)
            elapsed = time.monotonic() - started
            assert status == 503 and headers["Retry-After"] == "7"
            assert body == {"error": "no ready replica within 0.3s; retry later"}
            assert elapsed >= 0.3
            stats = service.router.stats()
            assert (stats.requests, stats.rejected, stats.queued) == (1, 1, 0)

    asyncio.run(scenario())


def test_a_replica_that_connects_within_the_queue_timeout_serves_the_waiting_requests():
    async def scenario() -> None:
        async with running(queue_timeout_s=0.5) as service:
            answers = [service.predict_later(n) for n in range(3)]
            await eventually(queued(service.router, 3), "three requests queued")
            # Slower than the queue timeout: time at a replica is not waiting.
            await service.replica(0, delay_s=0.7)
            results = await asyncio.gather(*answers)
            assert [(status, body["outputs"]["value"]) for status, body, _ in results] == [(200, 0), (200, 2), (200, 4)]
            assert service.router.stats().rejected == 0

    asyncio.run(scenario())


def test_tokens_bodies_and_health():
    async def scenario() -> None:
        async with running() as service:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                    await service.session.ws_connect(service.replica_url, headers=headers)
                assert refused.value.status == 401

            for body in (b"{not json", b'{"input": 1}', b"[1, 2]"):
                async with service.session.post(f"{service.public_url}/predict", data=body) as response:
                    assert response.status == 400
                    assert '"inputs"' in (await response.json())["error"]
            assert service.router.stats().requests == 0

            async with service.session.get(f"{service.public_url}/healthz") as response:
                assert (response.status, await response.json()) == (503, {"ready": 0, "replicas": []})
            await service.replica(3, max_batch=8, attempt=2)
            await eventually(connected(service.router, 1), "replica 3 ready")
            async with service.session.get(f"{service.public_url}/healthz") as response:
                assert response.status == 200
                assert await response.json() == {"ready": 1, "replicas": [
                    {"replica": 3, "run_id": "run-1", "attempt": 2, "state": "ready", "outstanding": 0, "served": 0,
                     "step": None}]}
            service.router.set_draining(3)
            async with service.session.get(f"{service.public_url}/healthz") as response:
                assert response.status == 503 and (await response.json())["ready"] == 0

    asyncio.run(scenario())


def test_bodies_beyond_aiohttps_defaults_are_served_and_beyond_the_limit_refused_413():
    async def scenario() -> None:
        async with running() as service:
            await service.replica(0)
            await eventually(connected(service.router, 1), "replica 0 ready")
            big = "x" * (3 * 1024 * 1024)  # a 3 MiB body, its answer twice that: both over aiohttp's defaults
            status, body, _ = await service.predict(big)
            assert (status, body["outputs"]["value"] == big * 2) == (200, True)
            async with service.session.post(f"{service.public_url}/predict",
                                            data=b'{"inputs": "' + b"x" * MAX_BODY_BYTES + b'"}') as response:
                assert response.status == 413
            assert service.router.stats().requests == 1

    asyncio.run(scenario())


def test_a_second_hello_for_a_replica_replaces_its_connection_and_retries_its_requests():
    async def scenario() -> None:
        async with running() as service:
            older = await service.replica(0, held=True)
            await eventually(connected(service.router, 1), "replica 0 ready")
            answers = [service.predict_later(n) for n in range(2)]
            await older.wait_received(2)
            newer = await service.replica(0, attempt=2)
            await asyncio.wait_for(older.closed.wait(), WAIT_S)  # the router closed the older socket
            results = await asyncio.gather(*answers)
            assert [(status, body["outputs"]["value"]) for status, body, _ in results] == [(200, 0), (200, 2)]
            assert newer.received == older.received
            stats = service.router.stats()
            assert (stats.served, stats.failed) == (2, 0)
            assert [(view.replica, view.attempt, view.served) for view in stats.replicas] == [(0, 2, 2)]

    asyncio.run(scenario())


def test_stop_answers_waiting_and_outstanding_requests_503():
    async def scenario() -> None:
        async with running() as service:
            replica = await service.replica(0, max_batch=1, held=True)
            await eventually(connected(service.router, 1), "replica 0 ready")
            answers = [service.predict_later(n) for n in range(4)]
            await replica.wait_received(2)
            await eventually(queued(service.router, 2), "two requests queued")
            await asyncio.wait_for(service.router.stop(), WAIT_S)
            results = await asyncio.gather(*answers)
            assert [status for status, _, _ in results] == [503] * 4
            assert all(headers["Retry-After"] == "5" for _, _, headers in results)
            await asyncio.wait_for(replica.closed.wait(), WAIT_S)
            with pytest.raises(aiohttp.ClientConnectionError):
                await service.predict(9)

    asyncio.run(scenario())


def test_a_user_who_hangs_up_leaves_the_queue_and_a_late_result_is_dropped():
    async def scenario() -> None:
        async with running() as service:
            with pytest.raises(asyncio.TimeoutError):
                await service.predict(1, timeout_s=0.1)
            await eventually(queued(service.router, 0), "the abandoned request out of the queue")

            replica = await service.replica(0, max_batch=1, delay_s=0.2)
            await eventually(connected(service.router, 1), "replica 0 ready")
            assert replica.received == []  # the abandoned request never reached it
            with pytest.raises(asyncio.TimeoutError):
                await service.predict(2, timeout_s=0.05)
            await replica.wait_received(1)
            # The result of the abandoned one comes and is dropped; the replica keeps serving.
            status, body, _ = await service.predict(3)
            assert (status, body["outputs"]["value"]) == (200, 6)
            stats = service.router.stats()
            assert (stats.requests, stats.served, stats.failed, stats.rejected) == (3, 1, 0, 0)
            assert [(view.outstanding, view.served) for view in stats.replicas] == [(0, 2)]

    asyncio.run(scenario())


def test_one_replica_at_a_time_reloads_and_only_while_every_other_is_ready():
    async def scenario() -> None:
        async with running(replicas=3) as service:
            router = service.router
            first = await service.replica(0, held=True)
            second, third = await service.replica(1), await service.replica(2)
            await eventually(connected(router, 3), "three ready replicas")
            held = [service.predict_later(n) for n in range(3)]  # one at each replica
            await first.wait_received(1)
            await first.send(encode(Reload(step=7)))
            await eventually(connected(router, 1, state="reloading"), "replica 0 let go")
            await second.send(encode(Reload(step=7)))  # 0 is reloading: 1 waits
            # The grant comes after the request 0 already held (it reaches the replica after the
            # router has marked it reloading: waited for, as a replica waits for it).
            await eventually(lambda: first.granted == [7], "replica 0's grant")
            assert first.said == ["request", "reload"]
            rest = await asyncio.gather(*(service.predict(n) for n in range(3, 13)))
            assert {body["outputs"]["replica"] for _, body, _ in rest} == {1, 2}  # nothing new to 0
            first.release.set()
            assert [status for status, _, _ in await asyncio.gather(*held)] == [200] * 3
            assert second.granted == []
            await first.hello(step=7)
            await eventually(lambda: [(v.state, v.step) for v in router.stats().replicas]
                             == [("ready", 7), ("reloading", None), ("ready", None)], "0 back, 1 let go")
            await eventually(lambda: second.granted == [7], "replica 1's grant")
            # With 1 reloading, 2 waits; when 1 is back but 0 is lost, 2 still waits: only 1 of the
            # others would be ready.
            await third.send(encode(Reload(step=7)))
            await first.close()
            await second.hello(step=7)
            await eventually(lambda: [v.state for v in router.stats().replicas] == ["ready", "ready"], "1 back")
            assert third.granted == []
            await service.replica(0)  # the lost replica is back: now 2 may go
            await eventually(connected(router, 1, state="reloading"), "replica 2 let go")
            await eventually(lambda: third.granted == [7], "replica 2's grant")

    asyncio.run(scenario())


def test_a_lone_replica_reloads_at_once_and_requests_wait_for_it():
    async def scenario() -> None:
        async with running(replicas=1) as service:
            replica = await service.replica(0)
            await eventually(connected(service.router, 1), "replica 0 ready")
            await replica.send(encode(Reload(step=3)))
            await eventually(connected(service.router, 1, state="reloading"), "replica 0 let go")
            waiting = service.predict_later(4)
            await eventually(queued(service.router, 1), "the request queued")
            await replica.hello(step=3)
            status, body, _ = await waiting
            assert (status, body["outputs"]) == (200, {"value": 8, "replica": 0})
            assert [v.step for v in service.router.stats().replicas] == [3]

    asyncio.run(scenario())


async def raw_replica(service: Service, index: int, *, run_id: str = "run-1", attempt: int = 1,
                      token: str = TOKEN) -> aiohttp.ClientWebSocketResponse:
    """A replica's socket driven by hand: hello said, nothing answered unless the test does."""
    ws = await service.session.ws_connect(service.replica_url, headers={"Authorization": f"Bearer {token}"})
    await ws.send_str(encode(Hello(replica=index, run_id=run_id, attempt=attempt, max_batch=4)))
    return ws


async def next_request(ws: aiohttp.ClientWebSocketResponse) -> Request:
    message = decode((await asyncio.wait_for(ws.receive(), WAIT_S)).data)
    assert isinstance(message, Request), message
    return message


def test_a_request_predict_raised_on_is_answered_422_and_one_a_replica_died_running_is_not_sent_again():
    async def scenario() -> None:
        async with running() as service:
            first = await raw_replica(service, 0)
            await eventually(connected(service.router, 1), "replica 0 ready")
            bad, deadly, innocent = (service.predict_later(n) for n in range(3))
            requests = [await next_request(first) for _ in range(3)]
            await first.send_str(encode(Failed(id=requests[0].id, error="ValueError: ragged")))
            status, body, _ = await bad
            assert (status, body) == (422, {"error": "predict failed on this request: ValueError: ragged"})

            # The replica says it runs predict on the second, then dies and its supervisor finds
            # its slice was not preempted: that one is answered 502 and never reaches the next
            # replica; the third, only queued at it, is served there.
            await first.send_str(encode(Working(ids=[requests[1].id])))
            await eventually(lambda: bool(service.router._replicas[0].working), "the working batch seen")
            await first.close()
            await asyncio.sleep(0)  # (nothing is answered before the supervisor's word: the next line would hang)
            assert not deadly.done()
            await eventually(lambda: bool(service.router._awaiting), "the lost replica's working batch held")
            service.router.replica_lost(ReplicaLoss(run_id="run-1", attempt=1, preempted=False))
            status, body, _ = await deadly
            assert status == 502 and "in case it is what ended" in body["error"], body
            second = await service.replica(1)
            status, body, _ = await innocent
            assert (status, body["outputs"]) == (200, {"value": 4, "replica": 1})
            assert second.received == [requests[2].id]
            stats = service.router.stats()
            assert (stats.requests, stats.served, stats.failed, stats.errors) == (3, 1, 1, 1)

    asyncio.run(scenario())


@pytest.mark.parametrize("word_first", [False, True])
def test_what_a_preempted_replica_ran_predict_on_is_served_by_another(word_first):
    """The supervisor's word that the slice was preempted may come before or after the socket closes."""
    async def scenario() -> None:
        async with running() as service:
            first = await raw_replica(service, 0, run_id="run-7", attempt=3)
            await eventually(connected(service.router, 1), "replica 0 ready")
            working, queued_only = service.predict_later(1), service.predict_later(2)
            sent = [await next_request(first) for _ in range(2)]
            await first.send_str(encode(Working(ids=[sent[0].id])))
            await eventually(lambda: bool(service.router._replicas[0].working), "the working batch seen")
            preempted = ReplicaLoss(run_id="run-7", attempt=3, preempted=True)
            if word_first:
                service.router.replica_lost(preempted)
            await first.close()
            await eventually(lambda: service.router.stats().queued >= 1, "the queued one back in the queue")
            if not word_first:
                service.router.replica_lost(ReplicaLoss(run_id="run-7", attempt=2, preempted=True))  # another attempt's
                await asyncio.sleep(0.05)
                assert service.router.stats().queued == 1  # the working one still waits for its own word
                service.router.replica_lost(preempted)
            second = await service.replica(1)
            assert [(await task)[:2] for task in (working, queued_only)] == [
                (200, {"outputs": {"value": 2, "replica": 1}}), (200, {"outputs": {"value": 4, "replica": 1}})]
            assert sorted(second.received) == sorted(r.id for r in sent)
            assert service.router.stats().failed == 0

    asyncio.run(scenario())


def test_without_the_supervisors_word_what_a_lost_replica_ran_predict_on_is_answered_502_after_the_queue_timeout():
    async def scenario() -> None:
        async with running(queue_timeout_s=0.5) as service:
            first = await raw_replica(service, 0)
            await eventually(connected(service.router, 1), "replica 0 ready")
            working = service.predict_later(1)
            [sent] = [await next_request(first)]
            await first.send_str(encode(Working(ids=[sent.id])))
            await eventually(lambda: bool(service.router._replicas[0].working), "the working batch seen")
            closed = time.monotonic()
            await first.close()
            await service.replica(1)
            status, body, _ = await working
            assert status == 502 and "in case it is what ended" in body["error"], body
            assert time.monotonic() - closed >= 0.45

    asyncio.run(scenario())


def test_a_deep_body_or_nan_in_it_is_a_400_and_nan_in_an_output_a_500_in_valid_json():
    async def scenario() -> None:
        async with running() as service:
            ws = await raw_replica(service, 0)
            await eventually(connected(service.router, 1), "replica 0 ready")
            for body in (b'{"inputs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", b'{"inputs": NaN}',
                         b'{"inputs": [1, -Infinity]}'):
                async with service.session.post(f"{service.public_url}/predict", data=body) as response:
                    text = await response.text()
                    assert response.status == 400, text
                    assert "nested too deeply" in text or "JSON has no form" in text, text
            answer = asyncio.create_task(service.session.post(f"{service.public_url}/predict", json={"inputs": 1}))
            request = await next_request(ws)
            await ws.send_str(json.dumps({"type": "result", "id": request.id, "outputs": [float("nan")]}))
            async with await answer as response:
                body = json.loads(await response.text(), parse_constant=lambda name: pytest.fail(f"{name} in JSON"))
                assert response.status == 500 and "NaN" in body["error"], body
            assert service.router.stats().requests == 1

    asyncio.run(scenario())


def test_a_forged_replica_is_refused_an_index_outside_the_service_and_cannot_evict_a_live_one():
    async def scenario() -> None:
        async with running() as service:
            real = await service.replica(0)
            await eventually(connected(service.router, 1), "replica 0 ready")
            forged = [await raw_replica(service, 7),  # not one of the service's slices
                      await raw_replica(service, 0, run_id="forged"),  # another run's
                      await raw_replica(service, 0, attempt=1)]  # the live one's own run and attempt
            reasons = []
            for ws in forged:
                frame = await asyncio.wait_for(ws.receive(), WAIT_S)
                assert (frame.type, ws.close_code) == (aiohttp.WSMsgType.CLOSE, aiohttp.WSCloseCode.POLICY_VIOLATION)
                reasons.append(frame.extra)
            assert "not one of this service's replicas [0, 1, 2, 3]" in reasons[0]
            assert all("only a newer attempt of that run replaces it" in reason for reason in reasons[1:]), reasons
            results = await asyncio.gather(*(service.predict(n) for n in range(12)))
            assert [(status, body["outputs"]) for status, body, _ in results] == \
                [(200, {"value": 2 * n, "replica": 0}) for n in range(12)]
            assert not real.closed.is_set() and len(real.received) == 12
            assert [(view.replica, view.run_id, view.attempt) for view in service.router.stats().replicas] == \
                [(0, "run-1", 1)]

    asyncio.run(scenario())


def test_a_half_sent_body_is_answered_408_after_the_body_timeout():
    async def scenario() -> None:
        async with running(body_timeout_s=0.5) as service:
            port = int(service.public_url.rsplit(":", 1)[1])
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 100\r\n\r\n{\"inputs\": ")  # and nothing more
            await writer.drain()
            started = time.monotonic()
            status_line = await asyncio.wait_for(reader.readline(), WAIT_S)
            assert status_line.startswith(b"HTTP/1.1 408"), status_line
            assert 0.5 <= time.monotonic() - started < 3
            writer.close()
            assert service.router.stats().requests == 0

    asyncio.run(scenario())


def test_a_router_given_its_predecessors_counters_counts_on_from_them():
    async def scenario() -> None:
        before = ServiceCounters(requests=10, served=7, failed=1, rejected=1, errors=1, at=1.0)
        async with running(counted=before) as service:
            await service.replica(0)
            await eventually(connected(service.router, 1), "replica 0 ready")
            assert (await service.predict(1))[0] == 200
            stats = service.router.stats()
            assert (stats.requests, stats.served, stats.failed, stats.rejected, stats.errors) == (11, 8, 1, 1, 1)

    asyncio.run(scenario())
