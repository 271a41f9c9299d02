"""Durable record of services: what `serve` started and what its router last counted.

A service is a router on the controller and one replica per slice; each replica is a run of
its own (`state/run_records.py`, with the service's id), so a replica is supervised, recovered and
paid for exactly like a training run. This record ties them together: the endpoint users
call, the replicas' runs, the router's counters (written by the router about once a second),
and whether the service is still meant to serve. In the same SQLite database as the runs.
"""

from __future__ import annotations

import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from podmanager.core.run_results import SERVING
from podmanager.state.db import Database, default_path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS services (
    service_id TEXT PRIMARY KEY,
    cluster TEXT NOT NULL,
    record TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS services_by_cluster ON services (cluster, created_at);
"""

FINISHED = ("cancelled", "failed")


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore")  # a field dropped since is no error


class ReplicaCounters(_Record):
    """One connected replica as the router last saw it."""

    replica: int  # its slice
    run_id: str
    attempt: int
    state: str  # ready | draining | reloading
    outstanding: int
    served: int
    step: int | None = None  # the checkpoint it serves


class ServiceCounters(_Record):
    """What the router counted since it started, and its latency over the last answers."""

    requests: int = 0
    served: int = 0
    failed: int = 0  # lost on two replicas: the requests the service failed
    rejected: int = 0  # 503 after the queue timeout: no replica was ready
    errors: int = 0  # predict raised on the request (422), or a broken replica's (500)
    queued: int = 0
    p50_ms: float | None = None
    p99_ms: float | None = None
    replicas: list[ReplicaCounters] = Field(default_factory=list)
    at: float | None = None  # unix seconds when the router wrote them
    # Serving goodput: of the seconds since every replica was first ready, those with every
    # replica ready (the router's own count: it starts again if the router is restarted).
    full_s: float = 0.0
    since_full_s: float = 0.0

    @property
    def goodput(self) -> float | None:
        return self.full_s / self.since_full_s if self.since_full_s > 0 else None


class ServiceRecord(_Record):
    service_id: str
    cluster: str
    program: str  # what the replicas run, as `runs` shows it
    slices: list[int]  # one replica per slice, in this order
    replica_runs: list[str] = Field(default_factory=list)  # each replica's run, as its slice
    endpoint: str  # http://HOST:PORT, where users send requests
    replica_url: str  # ws://HOST:PORT/replica, where the replicas connect
    status: str = SERVING  # serving | cancelled | failed
    message: str = ""
    counters: ServiceCounters = Field(default_factory=ServiceCounters)
    created_at: float = Field(default_factory=time.time)
    updated_at: float = Field(default_factory=time.time)

    @property
    def finished(self) -> bool:
        return self.status in FINISHED


class ServiceStore:
    def __init__(self, path: Path | None = None):
        self.path = path or default_path()
        self._db = Database(self.path, _SCHEMA)

    def close(self) -> None:
        self._db.close()

    def create(self, service: ServiceRecord) -> None:
        self._db.insert("INSERT INTO services (service_id, cluster, record, created_at) VALUES (?, ?, ?, ?)",
                        (service.service_id, service.cluster, service.model_dump_json(), service.created_at))

    def save(self, service: ServiceRecord) -> None:
        service.updated_at = time.time()
        self._db.rows("UPDATE services SET record=? WHERE service_id=?", (service.model_dump_json(), service.service_id))

    def save_counters(self, service_id: str, counters: ServiceCounters) -> None:
        """The router's counters, written over the record's without touching the rest (one
        transaction, so a `cancel` written meanwhile is kept)."""
        with self._db.immediate() as db:
            row = db.execute("SELECT record FROM services WHERE service_id=?", (service_id,)).fetchone()
            if row is None:
                return
            service = ServiceRecord.model_validate_json(row[0])
            service.counters = counters
            db.execute("UPDATE services SET record=? WHERE service_id=?", (service.model_dump_json(), service_id))

    def add_replica_run(self, service_id: str, run_id: str) -> None:
        """One more replica's run, as `serve` submits it (one transaction, so the router's
        counters written meanwhile are kept)."""
        with self._db.immediate() as db:
            row = db.execute("SELECT record FROM services WHERE service_id=?", (service_id,)).fetchone()
            if row is None:
                return
            service = ServiceRecord.model_validate_json(row[0])
            service.replica_runs.append(run_id)
            service.updated_at = time.time()
            db.execute("UPDATE services SET record=? WHERE service_id=?", (service.model_dump_json(), service_id))

    def get(self, service_id: str) -> ServiceRecord | None:
        rows = self._db.rows("SELECT record FROM services WHERE service_id=?", (service_id,))
        return ServiceRecord.model_validate_json(rows[0][0]) if rows else None

    def list(self, cluster: str | None = None) -> list[ServiceRecord]:
        if cluster is None:
            rows = self._db.rows("SELECT record FROM services ORDER BY created_at")
        else:
            rows = self._db.rows("SELECT record FROM services WHERE cluster=? ORDER BY created_at", (cluster,))
        return [ServiceRecord.model_validate_json(r[0]) for r in rows]

    def serving(self, cluster: str) -> list[ServiceRecord]:
        return [s for s in self.list(cluster) if not s.finished]
