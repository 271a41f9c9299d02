"""The one SQLite database under $PODMANAGER_HOME: WAL, so a run's supervisor writes while
any client reads; one connection per store object, safe to share between threads.

It fails safe: a store that is damaged (not a database, malformed), lost (missing or empty
while the folder still holds clusters) or deleted or replaced under a running process raises
`StateStoreError`, which names the file and the fix, instead of a raw sqlite error or (worse)
quietly writing to a file nobody will read again. What makes a lost store noticeable: each
recorded cluster keeps a copy of its spec beside the store (`spec_copy_path`), which is also
what `rebuild-state` rebuilds it from.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Iterator

import tenacity

from podmanager.core import paths
from podmanager.core.errors import StateStoreError

MEMORY = Path(":memory:")  # a stand-in store that keeps nothing (`down` when the real one is damaged)
SPEC_COPY = "spec.json"
SUFFIXES = ("", "-wal", "-shm")  # the database and its WAL files: moved aside together
# sqlite's primary result codes that mean the file, not the query, is wrong.
_DAMAGE_CODES = {
    10: "disk I/O error",  # SQLITE_IOERR: e.g. the file or its WAL deleted under an open connection
    11: "malformed",  # SQLITE_CORRUPT
    14: "cannot open",  # SQLITE_CANTOPEN
    26: "not a database",  # SQLITE_NOTADB
}
_MAGIC = b"SQLite format 3\x00"
_READONLY_DBMOVED = 1032  # the file was moved or replaced under an open connection
REBUILD_HINT = ("Run 'podmanager rebuild-state': it moves the damaged file aside and rebuilds the store from the "
                "cloud and the cluster folders (the run history and the event log are lost). "
                "'podmanager down -c NAME' works without it.")


def default_path() -> Path:
    return paths.home() / "state.db"


def spec_copy_path(folder: Path, cluster: str) -> Path:
    """Where the store keeps a copy of `cluster`'s spec: its folder under the store's folder."""
    return folder / "clusters" / cluster / SPEC_COPY


def recorded_clusters(folder: Path) -> list[str]:
    """Clusters with a spec copy under `folder`: those the store holds, or held before it was lost."""
    return sorted(p.parent.name for p in (folder / "clusters").glob(f"*/{SPEC_COPY}"))


def move_aside(path: Path) -> list[Path]:
    """Rename the database and its WAL files to `<name>.damaged-<time>*`; the new names."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    moved = []
    for suffix in SUFFIXES:
        source = path.with_name(path.name + suffix)
        if source.exists():
            target = path.with_name(f"{path.name}.damaged-{stamp}{suffix}")
            os.replace(source, target)
            moved.append(target)
    return moved


def damaged(path: Path, detail: str) -> StateStoreError:
    return StateStoreError(f"the state store {path} is damaged ({detail})", hint=REBUILD_HINT)


# POSIX advisory locks belong to the process, and closing *any* descriptor of a file drops all
# of them, SQLite's included: another process then takes the database for unused, checkpoints
# and deletes the WAL, and what this process writes next is lost
# (https://www.sqlite.org/howtocorrupt.html, "POSIX advisory locks canceled"). So podmanager
# reads the file itself (its header) only while this process has no connection to it.
_connections: dict[str, int] = {}
# Reentrant: the garbage collector may run a collected Database's finalizer (`_release`) in
# the middle of a block that holds it (during `sqlite3.connect` in `Database.__init__`).
_connections_lock = threading.RLock()


def _release(key: str, connection: sqlite3.Connection) -> None:
    connection.close()
    with _connections_lock:
        _connections[key] -= 1
        if not _connections[key]:
            del _connections[key]


class Database:
    def __init__(self, path: Path, schema: str, *, folder: Path | None = None, rebuild: bool = False):
        """`folder`: where the spec copies are (default: the database's folder); `rebuild`:
        create the database even though the folder shows it held clusters."""
        self.path = path
        self.folder = folder or path.parent
        # Re-entrant: rows inserted inside this thread's own `batch` take it again.
        self._lock = threading.RLock()
        self._identity: tuple[int, int] | None = None
        self._min_size = 0
        memory = path == MEMORY
        size = None
        if not memory:
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                pass
            if size is None and not rebuild:
                self._refuse_if_lost("missing")
        key = str(path) if memory else os.path.realpath(path)
        with _connections_lock:
            if size and not _connections.get(key):
                self._check_header()
            if size is None and not memory:
                # Owner-only, as SQLite gives its WAL and shared-memory files the database's mode:
                # the store holds every run's and service's record.
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
            self._db = sqlite3.connect(path, check_same_thread=False, timeout=30, isolation_level=None)
            _connections[key] = _connections.get(key, 0) + 1
        # Closes the connection when this object goes, unless `close` did.
        self._finalizer = weakref.finalize(self, _release, key, self._db)
        try:
            if not memory and not rebuild and not self._db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
                self._refuse_if_lost("empty")
            self._prepare(schema)
            if not memory:
                self._identity = _identity(path)
                self._min_size = self._db.execute("PRAGMA page_size").fetchone()[0]
        except sqlite3.DatabaseError as error:
            self._finalizer()
            raise self._error(error) from None
        except StateStoreError:
            self._finalizer()
            raise

    @tenacity.retry(retry=tenacity.retry_if_exception(lambda error: _locked(error)),
                    wait=tenacity.wait_random_exponential(multiplier=0.01, max=0.5),
                    stop=tenacity.stop_after_delay(30), reraise=True)
    def _prepare(self, schema: str) -> None:
        """WAL mode and the schema. Two processes opening a new database at once both ask for
        the lock WAL mode needs; SQLite answers one "database is locked" at once, without
        waiting (its busy timeout cannot break that deadlock), so this tries again."""
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(schema)

    def _refuse_if_lost(self, how: str) -> None:
        """A new database is fine, unless the folder shows that one held clusters before."""
        known = recorded_clusters(self.folder)
        if known:
            raise StateStoreError(
                f"the state store {self.path} is {how}, but it recorded cluster(s) {', '.join(known)}: "
                "it was deleted, truncated or lost", hint=REBUILD_HINT)

    def close(self) -> None:
        with self._lock:
            self._finalizer()

    def rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            self._check()
            try:
                return self._db.execute(sql, args).fetchall()
            except sqlite3.DatabaseError as error:
                raise self._error(error) from None

    def records(self, sql: str, args: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        """Rows as {column: value}."""
        with self._lock:
            self._check()
            try:
                cursor = self._db.execute(sql, args)
                names = [d[0] for d in cursor.description]
                return [dict(zip(names, row)) for row in cursor.fetchall()]
            except sqlite3.DatabaseError as error:
                raise self._error(error) from None

    def insert(self, sql: str, args: tuple[Any, ...]) -> int:
        """Run an INSERT; the new row's id."""
        with self._lock:
            self._check()
            try:
                return self._db.execute(sql, args).lastrowid or 0
            except sqlite3.DatabaseError as error:
                raise self._error(error) from None

    @contextlib.contextmanager
    def immediate(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken before its first read (BEGIN IMMEDIATE): no other
        connection writes between what the block reads and what it writes. Rolled back if
        the block raises."""
        with self._lock:
            self._check()
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """The rows this thread inserts inside, written in one transaction: one disk sync for
        all of them instead of one each (a 1,024-slice `up` records two events a slice). Other
        threads' writes wait for the end. Committed also when the block raises: what was
        recorded happened."""
        with self._lock:
            self._check()
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
            finally:
                self._db.execute("COMMIT")

    def _check(self) -> None:
        """The file this connection opened is still the store's and holds at least a page:
        SQLite goes on using a deleted, replaced or truncated file without a word (what it
        writes is lost), reading what its WAL holds. (A file overwritten in place is only seen
        when SQLite reads it: `_check_header` may not run here, see `_connections`.)"""
        if self._identity is None:
            return
        try:
            stat = os.stat(self.path)
            now: tuple[int, int] | None = (stat.st_dev, stat.st_ino)
        except FileNotFoundError:
            now, stat = None, None
        if now != self._identity:
            raise StateStoreError(
                f"the state store {self.path} was {'deleted' if now is None else 'replaced'} while this process "
                "used it; what it recorded since is lost", hint=REBUILD_HINT)
        if stat is not None and stat.st_size < self._min_size:
            raise damaged(self.path, "emptied" if not stat.st_size else f"truncated to {stat.st_size} bytes")

    def _check_header(self) -> None:
        """The file starts like an SQLite database and holds at least its first page. Only
        while this process has no connection to it (see `_connections`)."""
        try:
            with open(self.path, "rb") as handle:
                header = handle.read(100)
                size = os.fstat(handle.fileno()).st_size
        except OSError as error:
            raise damaged(self.path, str(error)) from None
        if not header.startswith(_MAGIC):
            raise damaged(self.path, "emptied" if not header else "file is not a database")
        page_size = int.from_bytes(header[16:18], "big") if len(header) >= 18 else 0
        if size < (65536 if page_size == 1 else page_size or 512):
            raise damaged(self.path, f"truncated to {size} bytes")

    def _error(self, error: sqlite3.DatabaseError) -> Exception:
        code = getattr(error, "sqlite_errorcode", None)
        if code is not None and (code & 0xFF in _DAMAGE_CODES or code == _READONLY_DBMOVED):
            return damaged(self.path, str(error))
        return error


def _identity(path: Path) -> tuple[int, int]:
    stat = os.stat(path)
    return stat.st_dev, stat.st_ino


def _locked(error: BaseException) -> bool:
    return isinstance(error, sqlite3.OperationalError) and "locked" in str(error)
