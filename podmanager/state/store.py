"""Durable record of clusters and an append-only event log (SQLite, WAL).

The cloud is the truth about what exists; this store remembers what was asked for (the
spec, so `status` and `down` work from a new process) and what happened (events).
"""

from __future__ import annotations

import json
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from podmanager.core.errors import SpecError
from podmanager.core.event_data import Event, payload, stored
from podmanager.core.events import EventKind
from podmanager.core.files import write_atomic
from podmanager.core.spec import ClusterSpec, parse_spec
from podmanager.state.db import MEMORY, Database, default_path, spec_copy_path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS clusters (
    name TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    backend TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    cluster TEXT NOT NULL,
    time REAL NOT NULL,
    kind TEXT NOT NULL,
    slice_index INTEGER,
    message TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_cluster ON events (cluster, id);
-- the dashboard reads a run's events by its time (state/store.py::events_page)
CREATE INDEX IF NOT EXISTS events_by_time ON events (cluster, time);
"""


WITHOUT_SPEC = "{}"  # a cluster row kept without its spec (`history_copy.py`)


@dataclass(frozen=True)
class ClusterRecord:
    name: str
    # The spec `up` stored (ClusterSpec's JSON), read into the model. None when this version
    # cannot read it (a spec of a version whose fields have since changed): the row still
    # lists, so `down` and the names known still find its cluster, and `spec` says why where
    # the spec itself is needed.
    stored_spec: ClusterSpec | None
    backend: str
    status: str
    created_at: float
    updated_at: float
    spec_problem: str | None = None  # why `stored_spec` is None

    @property
    def spec(self) -> ClusterSpec:
        """The stored spec; a SpecError naming it when this version cannot read it."""
        if self.stored_spec is None:
            raise SpecError(self.spec_problem or f"stored spec of {self.name} cannot be read",
                            hint=f"'podmanager down -f SPEC' deletes {self.name} by the spec you give it.")
        return self.stored_spec


class StateStore:
    """One SQLite database; safe to share between threads and between processes.

    Each recorded cluster's spec is also copied to `clusters/<name>/spec.json` beside the
    database: what tells a lost database from a new one, and what `rebuild-state` rebuilds from."""

    def __init__(self, path: Path | None = None, *, folder: Path | None = None, rebuild: bool = False):
        """`folder`: where the spec copies are (default: the database's folder); `rebuild`:
        start a new database even though the folder shows an earlier one was lost."""
        self.path = path or default_path()
        self.folder = folder or self.path.parent
        self._db = Database(self.path, _SCHEMA, folder=self.folder, rebuild=rebuild)

    @classmethod
    def in_memory(cls, folder: Path | None = None) -> "StateStore":
        """A stand-in for a damaged store: records nothing durably; deleting a cluster still
        removes its spec copy from `folder` (default: $PODMANAGER_HOME)."""
        return cls(MEMORY, folder=folder or default_path().parent)

    def close(self) -> None:
        self._db.close()

    def _execute(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return self._db.rows(sql, args)

    # ------------------------------------------------------------- clusters

    def save_cluster(self, name: str, spec: ClusterSpec, status: str) -> None:
        now = time.time()
        fields = spec.model_dump(mode="json")  # as every version stored it: the spec's fields in JSON
        self._execute(
            "INSERT INTO clusters (name, spec, backend, status, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT(name) DO UPDATE SET spec=excluded.spec, backend=excluded.backend, "
            "status=excluded.status, updated_at=excluded.updated_at",
            (name, json.dumps(fields), spec.backend.value, status, now, now),
        )
        if self.path != MEMORY:
            copy = spec_copy_path(self.folder, name)
            copy.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(copy, json.dumps({"name": name, "backend": spec.backend.value, "spec": fields}))

    def set_cluster_status(self, name: str, status: str) -> None:
        self._execute("UPDATE clusters SET status=?, updated_at=? WHERE name=?", (status, time.time(), name))

    def get_cluster(self, name: str) -> ClusterRecord | None:
        rows = self._execute("SELECT * FROM clusters WHERE name=?", (name,))
        return _cluster(rows[0]) if rows else None

    def list_clusters(self) -> list[ClusterRecord]:
        return [_cluster(row) for row in self._execute("SELECT * FROM clusters ORDER BY name")]

    def delete_cluster(self, name: str) -> None:
        self._execute("DELETE FROM clusters WHERE name=?", (name,))
        spec_copy_path(self.folder, name).unlink(missing_ok=True)

    # ------------------------------------------------------------- slices

    # ------------------------------------------------------------- events

    def batch(self) -> AbstractContextManager[None]:
        """Events this thread adds inside are written together (`Database.batch`)."""
        return self._db.batch()

    def add_event(self, cluster: str, kind: EventKind, message: str, *, slice_index: int | None = None,
                  when: float | None = None, **data: Any) -> Event:
        if not isinstance(kind, EventKind):  # a bare string could be misspelt: no filter would see it
            raise TypeError(f"event kind {kind!r} is not an EventKind member (podmanager/core/events.py)")
        fields = payload(kind, data)  # a field the kind does not hold fails here, where it is written
        when = time.time() if when is None else when
        event_id = self._db.insert(
            "INSERT INTO events (cluster, time, kind, slice_index, message, data) VALUES (?, ?, ?, ?, ?, ?)",
            (cluster, when, kind.value, slice_index, message, json.dumps(fields.as_json())),
        )
        return Event(event_id, cluster, when, kind, slice_index, message, fields)

    def last_event_time(self, cluster: str) -> float | None:
        """When the cluster's latest event was recorded; None if it has none."""
        rows = self._execute("SELECT time FROM events WHERE cluster=? ORDER BY id DESC LIMIT 1", (cluster,))
        return rows[0][0] if rows else None

    def events(self, cluster: str, *, after_id: int = 0, kind: EventKind | None = None,
               run_id: str | None = None) -> list[Event]:
        """The cluster's events after `after_id`, oldest first; only those of one kind, or
        caused by one run (`run_id` in their data), when asked."""
        sql = "SELECT * FROM events WHERE cluster=? AND id>?"
        args: tuple[Any, ...] = (cluster, after_id)
        if kind:
            sql += " AND kind=?"
            args += (kind,)
        if run_id:
            # No index on it: the (cluster, id) index already bounds a follower's poll to the
            # events since its last one, so this only reads those few rows' JSON.
            sql += " AND json_extract(data, '$.run_id')=?"
            args += (run_id,)
        rows = self._execute(sql + " ORDER BY id", args)
        return [_event(row) for row in rows]

    def events_page(self, cluster: str, *, before_id: int | None = None, after_id: int = 0,
                    kinds: tuple[str, ...] = (), slice_index: int | None = None, run_id: str | None = None,
                    since: float | None = None, until: float | None = None, limit: int = 200,
                    newest_first: bool = True) -> list[Event]:
        """At most `limit` of the cluster's events that match every filter given, newest first
        (a page of the dashboard's ledger; `before_id` pages back) or oldest first."""
        sql = "SELECT * FROM events WHERE cluster=? AND id>?"
        args: tuple[Any, ...] = (cluster, after_id)
        if before_id is not None:
            sql += " AND id<?"
            args += (before_id,)
        if kinds:
            sql += f" AND kind IN ({', '.join('?' * len(kinds))})"
            args += tuple(kinds)
        if slice_index is not None:
            sql += " AND slice_index=?"
            args += (slice_index,)
        if run_id:
            sql += " AND json_extract(data, '$.run_id')=?"
            args += (run_id,)
        if since is not None:
            sql += " AND time>=?"
            args += (since,)
        if until is not None:
            sql += " AND time<=?"
            args += (until,)
        sql += f" ORDER BY id {'DESC' if newest_first else 'ASC'} LIMIT ?"
        rows = self._execute(sql, args + (limit,))
        return [_event(row) for row in rows]

    def count_events(self, cluster: str) -> int:
        return int(self._execute("SELECT COUNT(*) FROM events WHERE cluster=?", (cluster,))[0][0])


def _event(row: tuple[Any, ...]) -> Event:
    return Event(row[0], row[1], row[2], row[3], row[4], row[5], stored(row[3], json.loads(row[6])))


def _cluster(row: tuple[Any, ...]) -> ClusterRecord:
    name = row[0]
    if row[1] == WITHOUT_SPEC:
        return ClusterRecord(name, None, row[2], row[3], row[4], row[5], f"a copy of {name}'s history keeps no spec")
    try:
        spec, problem = parse_spec(json.loads(row[1]), source=f"stored spec of {name}"), None
    except SpecError as invalid:
        spec, problem = None, invalid.message
    except ValueError as garbled:
        spec, problem = None, f"stored spec of {name} is no JSON ({garbled})"
    return ClusterRecord(name, spec, row[2], row[3], row[4], row[5], problem)
