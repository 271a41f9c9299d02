"""Clocks: real time for use, a manual clock for tests that must not wait; and `poll_until`,
the one way podmanager waits for a condition."""

from __future__ import annotations

import threading
import time
from typing import Callable, Protocol, TypeVar

from podmanager.core.errors import PodmanagerError, TimeoutExceededError

T = TypeVar("T")


class Clock(Protocol):
    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class RealClock:
    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))


class FakeClock:
    """Time moves only when told to; `sleep` moves it instead of waiting."""

    def __init__(self, start: float = 1_000_000.0):
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds

    def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))


def poll_until(predicate: Callable[[], T | None], *, timeout_s: float, interval_s: float, clock: Clock | None = None,
               what: str = "the condition", on_timeout: Callable[[], PodmanagerError] | None = None) -> T:
    """Call `predicate` until it returns something truthy, and return that; between calls
    sleep `interval_s` (never past the deadline). After `timeout_s` raise what `on_timeout()`
    gives, or a TimeoutExceededError naming `what`. The predicate is called at least once."""
    clock = clock or RealClock()
    deadline = clock.now() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        left = deadline - clock.now()
        if left <= 0:
            raise on_timeout() if on_timeout else TimeoutExceededError(f"{what} did not happen within {timeout_s:g}s")
        clock.sleep(min(interval_s, left))
