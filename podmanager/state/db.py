"""The one SQLite database under $PODMANAGER_HOME: WAL, so a run's supervisor writes while
any client reads; one connection per store object, safe to share between threads."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from pathlib import Path
from typing import Any, Iterator

from podmanager.core import paths


def default_path() -> Path:
    return paths.home() / "state.db"


class Database:
    def __init__(self, path: Path, schema: str):
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, timeout=30, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(schema)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def records(self, sql: str, args: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        """Rows as {column: value}."""
        with self._lock:
            cursor = self._db.execute(sql, args)
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, row)) for row in cursor.fetchall()]

    def insert(self, sql: str, args: tuple[Any, ...]) -> int:
        """Run an INSERT; the new row's id."""
        with self._lock:
            return self._db.execute(sql, args).lastrowid or 0

    @contextlib.contextmanager
    def immediate(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken before its first read (BEGIN IMMEDIATE): no other
        connection writes between what the block reads and what it writes. Rolled back if
        the block raises."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
