"""Where a service's router lives: a detached, named Ray actor on the head node, one per
service, like a run's supervisor (it outlives the client that ran `serve`; Ray starts it
again if its process dies, on the same ports, and the replicas connect again).

Why not Ray Serve's proxy: a replica here is a gang of processes on every host of a slice,
started, watched and replaced by podmanager's supervisor, which also sees the preemption
notice first; Serve's replicas are single actors its own controller restarts, so it would
fight the supervisor over the replicas' lifecycle. The router is a small aiohttp server
(`router.py`) in a thread of this actor, with an event loop of its own.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from dataclasses import dataclass, replace

from podmanager.controller import head_actors
from podmanager.serving.goodput import FullReplicaTime
from podmanager.serving.history import second_of
from podmanager.serving.router import ReplicaLoss, Router, RouterConfig
from podmanager.state import service_tokens
from podmanager.state.service_history import ServiceHistory
from podmanager.state.services import ServiceCounters, ServiceStore

log = logging.getLogger(__name__)

COUNTERS_EVERY_S = 1.0
COMPACT_EVERY_S = 60.0  # the history's old seconds rolled into minutes (state/service_history.py)


def actor_name(service_id: str) -> str:
    return f"router-{service_id}"


@dataclass(frozen=True)
class RouterPlace:
    """Where the router listens: users on `public`, replicas on `replica` (the head's address,
    which the TPU VMs reach). Ports are fixed before the actor starts, so a restarted one
    listens where the replicas and users already look."""

    public_host: str
    public_port: int
    replica_host: str
    replica_port: int


class RouterActor:
    """Plain class; `start_router` starts it as one of the head's actors. What its module
    imports is paid again at each restart, while users are refused: nothing of Ray's or the
    cloud's client at module level."""

    def __init__(self, home: str, service_id: str, config: RouterConfig, place: RouterPlace, cluster: str = "") -> None:
        head_actors.enter_home(home)  # the service's record is in the serving client's state folder
        self.service_id = service_id
        self.cluster = cluster
        if not config.token:  # read from its owner-only file, so it is in no Ray argument either
            token = service_tokens.read(cluster, service_id)
            if token is None:
                raise RuntimeError(f"service {service_id}: its token file "
                                   f"{service_tokens.token_path(cluster, service_id)} is missing")
            config = replace(config, token=token)
        self.full_time = FullReplicaTime(config.replicas)
        counted = _counted_before(service_id)
        if counted is not None and counted.at is not None:  # Ray restarted this actor: carry on counting
            self.full_time.resume(counted.full_s, counted.since_full_s, time.time() - counted.at, time.monotonic())
        self.router = Router(config, counted=counted)
        self._last_counted = counted  # the history's seconds are what changed since
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"router-{service_id}", daemon=True)
        self._thread.start()
        self._call(self.router.start(place.public_host, place.public_port, place.replica_host, place.replica_port))
        self._stopping = threading.Event()
        self._writer = threading.Thread(target=self._write_counters, name="router-counters", daemon=True)
        self._writer.start()

    def _call(self, coroutine, timeout_s: float = 30.0):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=timeout_s)

    def ready(self) -> bool:
        """Answers once the router listens (Ray returns only after __init__ did)."""
        return True

    def counters(self) -> ServiceCounters:
        return self._counters()

    def pid(self) -> int:
        return os.getpid()

    def set_draining(self, replica: int) -> None:
        self._loop.call_soon_threadsafe(self.router.set_draining, replica)

    def replica_lost(self, loss: ReplicaLoss) -> None:
        self._loop.call_soon_threadsafe(self.router.replica_lost, loss)

    def stop(self) -> None:
        """Answer what waits with 503 and close; the caller then kills the actor."""
        self._stopping.set()
        self._call(self.router.stop())
        ServiceStore().save_counters(self.service_id, self._counters())

    def _counters(self) -> ServiceCounters:
        async def read():
            return self.router.stats()

        stats = self._call(read())
        self.full_time.tick(sum(r.state == "ready" for r in stats.replicas), time.monotonic())
        return stats.model_copy(update={"at": time.time(), "full_s": self.full_time.full_s,
                                        "since_full_s": self.full_time.since_full_s})

    def _write_counters(self) -> None:
        """The router's counters into the service's record, for `runs` and `status` (which read
        no Ray), and the second they add to the service's history (the page's charts, whether
        or not a page is open), about once a second."""
        store, history = ServiceStore(), ServiceHistory()
        compacted = time.time()
        try:
            while not self._stopping.wait(COUNTERS_EVERY_S):
                try:
                    counters = self._counters()
                    store.save_counters(self.service_id, counters)
                    now = time.time()
                    history.add(self.cluster, self.service_id, second_of(self._last_counted, counters, now))
                    self._last_counted = counters
                    if now - compacted >= COMPACT_EVERY_S:
                        history.compact(self.service_id, now)
                        compacted = now
                except Exception as error:  # noqa: BLE001 - counters are for people; serving goes on
                    log.warning("router %s: counters not written: %s", self.service_id, error)
        finally:
            store.close()
            history.close()


def _counted_before(service_id: str) -> ServiceCounters | None:
    """The counters a router of this service wrote before this one (None for a new service)."""
    store = ServiceStore()
    try:
        service = store.get(service_id)
    finally:
        store.close()
    return service.counters if service is not None and service.counters.at is not None else None


def start_router(cluster: str, service_id: str, config: RouterConfig, place: RouterPlace) -> None:
    """Create the service's router actor on the head node (the caller is connected to the
    cluster's Ray) and wait until it listens. With no `config.token` the actor reads the
    service's token file (`state/service_tokens.py`)."""
    import ray

    actor = head_actors.start(RouterActor, actor_name(service_id), service_id, config, place, cluster,
                              max_concurrency=4,  # counters and draining while a `stop` waits
                              runtime_env={"env_vars": head_actors.NOT_SLOWED})  # latency
    ray.get(actor.ready.remote(), timeout=60)


def stop_router(service_id: str) -> bool:
    """Stop the service's router if it is there; True if it was."""
    import ray

    actor = head_actors.find(actor_name(service_id))
    if actor is None:
        return False
    try:
        ray.get(actor.stop.remote(), timeout=30)
    except Exception as error:  # noqa: BLE001 - it goes either way
        log.warning("router %s did not stop cleanly: %s", service_id, error)
    ray.kill(actor, no_restart=True)
    return True
