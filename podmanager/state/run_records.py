"""Durable record of runs: everything a supervisor needs to carry on after a restart.

One row per run, in the same SQLite database as the clusters (its own connection; WAL lets
the supervisor write while any client reads). The supervisor writes the row before each
step it takes (launch, watch, replace, relaunch), so a restarted supervisor re-reads where
it was; clients read it to follow, list and cancel runs.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from podmanager.core.errors import SpecError
from podmanager.core.run_results import ACTIVE, FINISHED, Ledger, RunProgress, RunResult
from podmanager.core.workload import Workload
from podmanager.state.db import Database, default_path
from podmanager.state.run_state import PHASE, Launching, RunPhase, SupervisorProcess

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    cluster TEXT NOT NULL,
    workload TEXT NOT NULL,
    slices TEXT NOT NULL,
    budgets TEXT NOT NULL,
    checkpoint_dir TEXT,
    status TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    phase TEXT NOT NULL,
    ledger TEXT NOT NULL,
    progress TEXT NOT NULL,
    result TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    supervisor TEXT NOT NULL,
    warnings TEXT NOT NULL DEFAULT '[]',
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_by_cluster ON runs (cluster, created_at);
-- Each cluster's hot spares by slice index (core/spares.py): here, beside the runs, so a swap
-- gives a run the spare and makes its lost slice a spare in one transaction.
CREATE TABLE IF NOT EXISTS spares (
    cluster TEXT NOT NULL,
    slice INTEGER NOT NULL,
    PRIMARY KEY (cluster, slice)
);
"""

_JSON_FIELDS = ("slices", "budgets", "warnings")  # plain JSON; the rest are pydantic models
# Columns added since the first release, with their definition: a database from before gets them.
_ADDED_COLUMNS = {"warnings": "TEXT NOT NULL DEFAULT '[]'"}


@dataclass
class RunRecord:
    run_id: str
    cluster: str
    workload: Workload  # as submitted, its environment's values hidden (state/run_secrets.py keeps them)
    slices: list[int]
    budgets: dict[str, int]  # overrides of the spec's recovery budgets
    checkpoint_dir: str | None
    status: str = "starting"
    attempt: int = 0
    phase: RunPhase = field(default_factory=Launching)  # where the supervisor is (state/run_state.py)
    # What happened so far: every attempt's result and every incident; the budgets are counted
    # from the incidents.
    ledger: Ledger = field(default_factory=Ledger)
    progress: RunProgress = field(default_factory=RunProgress)
    result: RunResult | None = None  # once finished
    cancel_requested: bool = False
    supervisor: SupervisorProcess = field(default_factory=SupervisorProcess)
    warnings: list[str] = field(default_factory=list)  # what the user should know of it (shown by `runs`)
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    @property
    def finished(self) -> bool:
        """The run has ended: what every reader (`wait`, `attach`, `logs -F`) goes by, and
        nothing else (not the files in its folder)."""
        return self.status in FINISHED


class RunStore:
    def __init__(self, path: Path | None = None):
        self.path = path or default_path()
        self._db = Database(self.path, _SCHEMA)
        present = {row[1] for row in self._db.rows("PRAGMA table_info(runs)")}
        for name, definition in _ADDED_COLUMNS.items():
            if name not in present:
                self._db.rows(f"ALTER TABLE runs ADD COLUMN {name} {definition}")

    def close(self) -> None:
        self._db.close()

    def _rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[RunRecord]:
        return [_record(row) for row in self._db.records(sql, args)]

    def create(self, run: RunRecord) -> RunRecord:
        values = _values(run)
        columns = ", ".join(values)
        self._db.insert(f"INSERT INTO runs ({columns}) VALUES ({', '.join('?' * len(values))})", tuple(values.values()))
        return run

    def claim(self, run: RunRecord) -> RunRecord | None:
        """Write `run` unless an active run of its cluster holds one of its slices, checking
        and writing in one transaction: of several runs claiming a slice at once, exactly
        one gets it. None when `run` is written; else the run in the way (nothing written).
        A run id already taken (the same program submitted twice in one millisecond) gets a
        suffix: `run.run_id` is the id written."""
        wanted = set(run.slices)
        with self._db.immediate() as db:
            spare = sorted(wanted & _spares(db, run.cluster))
            if spare:
                raise SpecError(f"--slices: slice(s) {spare} are hot spares of {run.cluster}; a run never works "
                                "on a spare", hint="Leave --slices out (a run gets every working slice) or "
                                "name working slices ('podmanager status' shows which are spares).")
            cursor = db.execute(f"SELECT * FROM runs WHERE cluster=? AND status IN ({', '.join('?' * len(ACTIVE))}) "
                                "ORDER BY created_at", (run.cluster, *ACTIVE))
            names = [d[0] for d in cursor.description]
            for row in cursor.fetchall():
                holder = _record(dict(zip(names, row)))
                if wanted & set(holder.slices):
                    return holder
            base, suffix = run.run_id, 1
            while db.execute("SELECT 1 FROM runs WHERE run_id=?", (run.run_id,)).fetchone():
                suffix += 1
                run.run_id = f"{base}-{suffix}"
            values = _values(run)
            db.execute(f"INSERT INTO runs ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})",
                       tuple(values.values()))
        return None

    def spares(self, cluster: str) -> list[int]:
        """The cluster's hot spares (slice indexes) as recorded now."""
        return sorted(row[0] for row in self._db.rows("SELECT slice FROM spares WHERE cluster=?", (cluster,)))

    def set_spares(self, cluster: str, indexes: list[int]) -> None:
        """Record these slices as the cluster's spares (`up`, from `core.spares.assign`; [] at `down`)."""
        with self._db.immediate() as db:
            db.execute("DELETE FROM spares WHERE cluster=?", (cluster,))
            db.executemany("INSERT INTO spares (cluster, slice) VALUES (?, ?)", [(cluster, i) for i in indexes])

    def swap_spare(self, run: RunRecord, lost: int, spare: int) -> bool:
        """In one transaction: `spare` becomes the run's slice in place of `lost`, and `lost` a
        spare (to be made again). False (nothing changed) if `spare` is no longer a spare (another
        run took it) or `lost` is not the run's. `run.slices` is updated on success."""
        with self._db.immediate() as db:
            found = db.execute("SELECT slices FROM runs WHERE run_id=?", (run.run_id,)).fetchone()
            slices = json.loads(found[0]) if found else []
            if spare not in _spares(db, run.cluster) or lost not in slices:
                return False
            slices = sorted(spare if i == lost else i for i in slices)
            db.execute("DELETE FROM spares WHERE cluster=? AND slice=?", (run.cluster, spare))
            db.execute("INSERT OR IGNORE INTO spares (cluster, slice) VALUES (?, ?)", (run.cluster, lost))
            db.execute("UPDATE runs SET slices=?, updated_at=? WHERE run_id=?",
                       (json.dumps(slices), time.time(), run.run_id))
        run.slices = slices
        return True

    def release(self, run_id: str) -> bool:
        """Forget a claimed run that never started (its submit failed before its supervisor
        took it on), so its slices are free again; True if there was one."""
        with self._db.immediate() as db:
            # A supervisor writes its pid into `supervisor` first thing: then the run is its.
            return db.execute("DELETE FROM runs WHERE run_id=? AND status='starting' AND supervisor='{}'",
                              (run_id,)).rowcount > 0

    def save(self, run: RunRecord) -> None:
        """Write the whole record (the supervisor's checkpoint of itself). A cancel asked for
        meanwhile is never overwritten."""
        run.updated_at = time.time()
        values = _values(run)
        values.pop("cancel_requested")
        assignments = ", ".join(f"{k}=?" for k in values)
        self._db.rows(f"UPDATE runs SET {assignments} WHERE run_id=?", (*values.values(), run.run_id))
        run.cancel_requested = self.cancel_requested(run.run_id)

    def get(self, run_id: str) -> RunRecord | None:
        found = self._rows("SELECT * FROM runs WHERE run_id=?", (run_id,))
        return found[0] if found else None

    def list(self, cluster: str | None = None) -> list[RunRecord]:
        if cluster is None:
            return self._rows("SELECT * FROM runs ORDER BY created_at")
        return self._rows("SELECT * FROM runs WHERE cluster=? ORDER BY created_at", (cluster,))

    def page(self, cluster: str, *, offset: int = 0, limit: int = 50, status: str | None = None,
             text: str | None = None) -> tuple[int, list[RunRecord]]:
        """(how many match, at most `limit` of them from `offset`, newest first): a page of the
        dashboard's runs, read without parsing the others. `text`: in the run's id or workload."""
        where, args = "cluster=?", [cluster]
        if status:
            where += " AND status=?"
            args.append(status)
        if text:
            pattern = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            where += " AND (run_id LIKE ? ESCAPE '\\' OR workload LIKE ? ESCAPE '\\')"
            args += [pattern, pattern]
        total = self._db.rows(f"SELECT COUNT(*) FROM runs WHERE {where}", tuple(args))[0][0]
        found = self._rows(f"SELECT * FROM runs WHERE {where} ORDER BY created_at DESC, run_id DESC LIMIT ? OFFSET ?",
                           (*args, limit, offset))
        return int(total), found

    def active(self, cluster: str) -> list[RunRecord]:
        return self._rows(f"SELECT * FROM runs WHERE cluster=? AND status IN ({', '.join('?' * len(ACTIVE))}) "
                          "ORDER BY created_at", (cluster, *ACTIVE))

    def stamps(self, cluster: str) -> dict[str, float]:
        """Each run of the cluster -> when its record was last written: what a reader that keeps
        records between reads (the dashboard's metrics) re-reads only when it changed."""
        return {row[0]: row[1] for row in self._db.rows("SELECT run_id, updated_at FROM runs WHERE cluster=?",
                                                         (cluster,))}

    def request_cancel(self, run_id: str) -> None:
        self._db.rows("UPDATE runs SET cancel_requested=1, updated_at=? WHERE run_id=?", (time.time(), run_id))

    def cancel_requested(self, run_id: str) -> bool:
        found = self._db.rows("SELECT cancel_requested FROM runs WHERE run_id=?", (run_id,))
        return bool(found and found[0][0])


def _spares(db: Any, cluster: str) -> set[int]:
    return {row[0] for row in db.execute("SELECT slice FROM spares WHERE cluster=?", (cluster,)).fetchall()}


def _values(run: RunRecord) -> dict[str, Any]:
    values = dict(run.__dict__)
    for name in _JSON_FIELDS:
        values[name] = json.dumps(values[name], default=str) if values[name] is not None else None
    values["workload"] = run.workload.model_dump_json()
    values["ledger"] = run.ledger.model_dump_json()
    values["result"] = run.result.model_dump_json() if run.result is not None else None
    values["phase"] = PHASE.dump_json(run.phase).decode()
    values["progress"] = run.progress.model_dump_json(exclude_none=True)
    # Its defaults left out: a run no supervisor took on yet is '{}' (see `release`).
    values["supervisor"] = run.supervisor.model_dump_json(exclude_defaults=True)
    values["cancel_requested"] = int(run.cancel_requested)
    return values


def _record(row: dict[str, Any]) -> RunRecord:
    for name in _JSON_FIELDS:
        if row[name] is not None:
            row[name] = json.loads(row[name])
    # A record of an earlier version reads as well: its ledger's "causes", its result's
    # "metrics" and its incidents' "slice" are ignored (the rest says the same).
    row["workload"] = Workload.model_validate_json(row["workload"])
    row["ledger"] = Ledger.model_validate_json(row["ledger"])
    row["result"] = RunResult.model_validate_json(row["result"]) if row["result"] is not None else None
    row["phase"] = PHASE.validate_json(row["phase"])
    row["progress"] = RunProgress.model_validate_json(row["progress"])
    row["supervisor"] = SupervisorProcess.model_validate_json(row["supervisor"])
    row["cancel_requested"] = bool(row["cancel_requested"])
    return RunRecord(**row)

