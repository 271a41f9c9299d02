"""The router's counters turned into a second of the service's history
(`state/service_history.py`): what changed since the last look, so the series stays whole
whether or not a page is open."""

from __future__ import annotations

import math

from podmanager.state.service_history import Point
from podmanager.state.services import ServiceCounters


def failures(counters: ServiceCounters) -> int:
    """Requests the service did not answer: lost on two replicas, or no replica ready in time.
    (A predict that raised on its input (`errors`) is the request's fault, not the service's.)"""
    return counters.failed + counters.rejected


def second_of(before: ServiceCounters | None, now: ServiceCounters, at: float) -> Point:
    """The second that ends at `at`: the requests and failures counted since `before` (a router
    started afresh counts from 0: then all of `now`), its latency and ready replicas now."""
    requests = now.requests - before.requests if before is not None else now.requests
    failed = failures(now) - failures(before) if before is not None else failures(now)
    if requests < 0 or failed < 0:  # counters that went back: a new router's
        requests, failed = now.requests, failures(now)
    return Point(start=float(math.floor(at)) - 1.0, width_s=1.0, requests=requests, failed=failed,
                 p50_ms=now.p50_ms, p99_ms=now.p99_ms, replicas=sum(r.state == "ready" for r in now.replicas))
