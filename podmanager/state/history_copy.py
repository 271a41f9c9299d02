"""One cluster's history copied out of the state store into a database of its own: its events,
runs, services and services' request history, and its cluster row without its spec. What a
page of the cluster needs once its controller VM is deleted (`api/history_bundle.py`), and no
secret: the records hold none (a run's environment is kept redacted, tokens are files), and
the spec is left out all the same."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from podmanager.state.run_records import RunStore
from podmanager.state.service_history import ServiceHistory
from podmanager.state.services import ServiceStore
from podmanager.state.store import WITHOUT_SPEC, StateStore

# The tables copied, each with the column that names the cluster.
TABLES = {"events": "cluster", "runs": "cluster", "services": "cluster", "service_history": "cluster"}


def copy_history(source: Path, cluster: str, destination: Path) -> None:
    """Write `cluster`'s records from the store at `source` into a new database at
    `destination` (which must not exist), read in one transaction of the source."""
    if destination.exists():
        raise FileExistsError(destination)
    for opened in (StateStore(destination, rebuild=True), RunStore(destination), ServiceStore(destination),
                   ServiceHistory(destination)):
        opened.close()  # each made its tables
    db = sqlite3.connect(destination, isolation_level=None)
    try:
        db.execute("ATTACH DATABASE ? AS source", (str(source),))  # only read
        db.execute("BEGIN")
        present = {row[0] for row in db.execute("SELECT name FROM source.sqlite_master WHERE type='table'")}
        for table, key in TABLES.items():
            if table not in present:  # a store from before the table was added
                continue
            columns = _shared_columns(db, table)
            db.execute(f"INSERT INTO main.{table} ({columns}) SELECT {columns} FROM source.{table} WHERE {key}=?",
                       (cluster,))
        db.execute("INSERT INTO main.clusters (name, spec, backend, status, created_at, updated_at) "
                   "SELECT name, ?, backend, status, created_at, updated_at FROM source.clusters WHERE name=?",
                   (WITHOUT_SPEC, cluster))
        db.execute("COMMIT")
        db.execute("DETACH DATABASE source")
    finally:
        db.close()


def _shared_columns(db: sqlite3.Connection, table: str) -> str:
    """The columns both copies of `table` have, in the new one's order (a store made by an
    older podmanager may lack a column added since, or hold them in another order)."""
    mine = [row[1] for row in db.execute(f"PRAGMA main.table_info({table})")]
    theirs = {row[1] for row in db.execute(f"PRAGMA source.table_info({table})")}
    return ", ".join(f'"{name}"' for name in mine if name in theirs)
