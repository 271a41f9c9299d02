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

    def resume(self, full_s: float, since_full_s: float, gap_s: float, now: float) -> None:
        """Carry on from what a router before this one counted, `gap_s` ago (a restarted
        router: the gap counts as not full)."""
        self.full_s = full_s
        if since_full_s > 0:
            self.since_full_s = since_full_s + max(gap_s, 0.0)
            self._ticked_at = now
