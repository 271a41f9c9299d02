"""A service's serving goodput: of the time since every replica was first ready, the share
with every replica ready."""

from __future__ import annotations


class FullReplicaTime:
    """Fed the count of ready replicas at each tick (about once a second); between two ticks
    the service counts as it was at the later one."""

    def __init__(self, replicas: int) -> None:
        self.replicas = replicas
        self.full_s = 0.0
        self.since_full_s = 0.0  # from the first tick with every replica ready
        self._ticked_at: float | None = None

    def tick(self, ready: int, now: float) -> None:
        full = ready >= self.replicas
        if self._ticked_at is not None:
            elapsed = now - self._ticked_at
            self.since_full_s += elapsed
            if full:
                self.full_s += elapsed
        if self._ticked_at is not None or full:
            self._ticked_at = now
