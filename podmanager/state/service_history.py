"""A service's requests over time, kept whether or not a page is open: one row per second for
the last hour, then one per minute for the last day, then one per hour for 30 days. The router
adds a second's row about once a second (`serving/router_actor.py`); `compact` rolls the
seconds older than an hour into minutes (and minutes older than a day into hours) and drops
what is older than 30 days, so a service that serves for months holds about 5,800 rows.

A coarser row sums the requests and failures of the rows it replaces; its p50 is their mean
and its p99 their highest (percentiles do not add up: the highest is the bound that hides no
slow second); its replicas are the fewest ready in it (a dip stays visible).

In the same SQLite database as the services, so it survives a controller's reboot and is
copied with the cluster's history before `down` (`state/history_copy.py`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from podmanager.state.db import Database, default_path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS service_history (
    service_id TEXT NOT NULL,
    cluster TEXT NOT NULL,
    width_s REAL NOT NULL,
    start REAL NOT NULL,
    requests INTEGER NOT NULL,
    failed INTEGER NOT NULL,
    p50_ms REAL,
    p99_ms REAL,
    replicas INTEGER NOT NULL,
    PRIMARY KEY (service_id, width_s, start)
);
"""

# A row for a time that has one already: added to it (p99: the higher; a missing percentile is no 0).
_MERGE = (" ON CONFLICT (service_id, width_s, start) DO UPDATE SET requests=requests+excluded.requests, "
          "failed=failed+excluded.failed, p50_ms=coalesce(excluded.p50_ms, p50_ms), "
          "p99_ms=CASE WHEN p99_ms IS NULL THEN excluded.p99_ms WHEN excluded.p99_ms IS NULL THEN p99_ms "
          "ELSE max(p99_ms, excluded.p99_ms) END, replicas=min(replicas, excluded.replicas)")
# (a row's width, how long rows of that width are kept), finest first.
TIERS: tuple[tuple[float, float], ...] = ((1.0, 3600.0), (60.0, 86400.0), (3600.0, 30 * 86400.0))
# What one service's series holds at most: each tier's time, and one coarser row's worth still fine.
MAX_POINTS = sum(int((kept + coarser) / width) for (width, kept), (coarser, _) in zip(TIERS, TIERS[1:])) \
    + int(TIERS[-1][1] / TIERS[-1][0]) + 1


@dataclass(frozen=True)
class Point:
    """The service's requests in [start, start + width_s)."""

    start: float
    width_s: float
    requests: int  # received
    failed: int  # not answered: lost on two replicas, or rejected after the queue timeout
    p50_ms: float | None
    p99_ms: float | None
    replicas: int  # ready (the fewest in the row's time)

    def as_list(self) -> list[float | int | None]:
        return [self.start, self.width_s, self.requests, self.failed, self.p50_ms, self.p99_ms, self.replicas]


class ServiceHistory:
    def __init__(self, path: Path | None = None):
        self.path = path or default_path()
        self._db = Database(self.path, _SCHEMA)

    def close(self) -> None:
        self._db.close()

    def add(self, cluster: str, service_id: str, point: Point) -> None:
        """A second's row (two in one second add up, as one row)."""
        self._db.rows(
            "INSERT INTO service_history (service_id, cluster, width_s, start, requests, failed, p50_ms, p99_ms, "
            "replicas) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)" + _MERGE,
            (service_id, cluster, point.width_s, point.start, point.requests, point.failed, point.p50_ms,
             point.p99_ms, point.replicas))

    def compact(self, service_id: str, now: float) -> None:
        """Each tier's rows older than it keeps, rolled into the next tier's (whole rows of
        the coarser width only: a minute is made once all its seconds are old), and the
        coarsest tier's past its time dropped."""
        with self._db.immediate() as db:
            for (width, kept), (coarser, _) in zip(TIERS, TIERS[1:]):
                cutoff = math.floor((now - kept) / coarser) * coarser  # the start of the first coarse row kept fine
                db.execute(
                    "INSERT INTO service_history (service_id, cluster, width_s, start, requests, failed, p50_ms, "
                    "p99_ms, replicas) SELECT service_id, cluster, ?, CAST(start / ? AS INTEGER) * ?, sum(requests), "
                    "sum(failed), avg(p50_ms), max(p99_ms), min(replicas) FROM service_history "
                    "WHERE service_id=? AND width_s=? AND start<? GROUP BY CAST(start / ? AS INTEGER) "
                    + _MERGE,
                    (coarser, coarser, coarser, service_id, width, cutoff, coarser))
                db.execute("DELETE FROM service_history WHERE service_id=? AND width_s=? AND start<?",
                           (service_id, width, cutoff))
            width, kept = TIERS[-1]
            db.execute("DELETE FROM service_history WHERE service_id=? AND width_s=? AND start<?",
                       (service_id, width, now - kept))

    def series(self, service_id: str) -> list[Point]:
        """Every row of the service, oldest first (at most MAX_POINTS)."""
        rows = self._db.rows(
            "SELECT start, width_s, requests, failed, p50_ms, p99_ms, replicas FROM service_history "
            "WHERE service_id=? ORDER BY start, width_s DESC", (service_id,))
        return [Point(*row) for row in rows]
