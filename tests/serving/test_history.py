"""The router's counters as seconds of the service's history (serving/history.py), and the
router writing one about every second whether or not a page is open (serving/router_actor.py)."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

from podmanager.core import paths
from podmanager.core.clock import RealClock, poll_until
from podmanager.serving.history import second_of
from podmanager.serving.router import RouterConfig
from podmanager.serving.router_actor import RouterActor, RouterPlace
from podmanager.state.service_history import ServiceHistory
from podmanager.state.services import (
    ReplicaCounters,
    ServiceCounters,
    ServiceRecord,
    ServiceStore,
)


def counters(requests: int, failed: int = 0, rejected: int = 0, errors: int = 0, ready: int = 1) -> ServiceCounters:
    replicas = [ReplicaCounters(replica=i, run_id=f"r{i}", attempt=0, state="ready" if i < ready else "draining",
                                outstanding=0, served=0) for i in range(2)]
    return ServiceCounters(requests=requests, failed=failed, rejected=rejected, errors=errors, p50_ms=4.0,
                           p99_ms=8.0, replicas=replicas)


def test_a_second_is_what_changed_since_the_last_look():
    point = second_of(counters(100, failed=1, rejected=2, errors=5), counters(130, failed=2, rejected=4, errors=9, ready=2),
                      1000.4)
    assert (point.start, point.width_s, point.requests, point.failed) == (999.0, 1.0, 30, 3)  # errors are the input's
    assert (point.p50_ms, point.p99_ms, point.replicas) == (4.0, 8.0, 2)
    assert second_of(None, counters(7, rejected=1), 1000.0).requests == 7  # a router's first second
    assert second_of(counters(500), counters(7), 1000.0).requests == 7  # a router that counts from 0 again


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_router_keeps_each_seconds_requests_with_no_page_open():
    ServiceStore().create(ServiceRecord(service_id="svc", cluster="c", program="p.py", slices=[0],
                                        endpoint="", replica_url=""))
    public = free_port()
    router = RouterActor(str(paths.home()), "svc", RouterConfig(token="t", slices=(0,), queue_timeout_s=0.05),
                         RouterPlace("127.0.0.1", public, "127.0.0.1", free_port()), "c")
    try:
        for _ in range(5):  # no replica: each is refused after the queue timeout
            asked = urllib.request.Request(f"http://127.0.0.1:{public}/predict", data=b'{"inputs": 1}',
                                           headers={"Content-Type": "application/json"})
            try:
                urllib.request.urlopen(asked, timeout=10)
            except urllib.error.HTTPError as refused:
                assert refused.code == 503
        history = ServiceHistory()
        rows = poll_until(lambda: (found := history.series("svc")) and sum(p.requests for p in found) == 5 and found,
                          timeout_s=30, interval_s=0.1, clock=RealClock(), what="the seconds of the five requests")
        assert sum(p.failed for p in rows) == 5 and {p.width_s for p in rows} == {1.0}
        assert all(p.replicas == 0 for p in rows)
    finally:
        router.stop()
