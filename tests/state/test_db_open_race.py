"""Commands started at the same moment on a new state folder all open its store: SQLite
answers one of the processes that switch a new database to WAL "database is locked" at once
(no busy wait breaks that deadlock), and the store tries again instead of failing."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

ROUNDS = 20
PROCESSES = 3


def open_each(paths: list[str], barrier, results) -> None:  # type: ignore[no-untyped-def]
    from podmanager.state.db import Database

    for path in paths:
        barrier.wait(timeout=60)
        try:
            Database(Path(path), "CREATE TABLE IF NOT EXISTS t(x);", folder=Path(path).parent)
            results.put("ok")
        except Exception as error:  # noqa: BLE001 - the test reports whatever went wrong
            results.put(repr(error))


def test_processes_opening_a_new_store_at_once_all_succeed(tmp_path):
    context = multiprocessing.get_context("spawn")
    paths = []
    for index in range(ROUNDS):
        (tmp_path / str(index)).mkdir()
        paths.append(str(tmp_path / str(index) / "state.db"))
    barrier, results = context.Barrier(PROCESSES), context.Queue()
    workers = [context.Process(target=open_each, args=(paths, barrier, results)) for _ in range(PROCESSES)]
    for worker in workers:
        worker.start()
    try:
        outcomes = [results.get(timeout=120) for _ in range(ROUNDS * PROCESSES)]
    finally:
        for worker in workers:
            worker.join(timeout=30)
    assert [o for o in outcomes if o != "ok"] == []
