"""A cluster's history as one zip file, made by its controller for the user's machine to keep
before `down` deletes the controller VM (`client/kept_history.py` unpacks it; the page's
`api/history` route serves it): the cluster's records (`state/history_copy.py`) and each run's
metric series, thinned to at most SERIES_POINTS. The hosts' output is not in it: it may be
large, and a program may print what it should not."""

from __future__ import annotations

import io
import json
import tempfile
import zipfile
from pathlib import Path

from podmanager.attempts.logs import RunFolder
from podmanager.client.kept_history import DATABASE
from podmanager.core.paths import PROGRESS_FILE, RUNS
from podmanager.state import StateStore
from podmanager.state.history_copy import copy_history
from podmanager.state.run_records import RunStore

SERIES_POINTS = 10_000  # of a run's metric series kept: the page draws at most 2,000 a reply anyway


def bundle(store: StateStore, cluster: str) -> bytes:
    """The zip: `state.db` and `runs/<run id>/progress.jsonl`."""
    with tempfile.TemporaryDirectory(prefix="pm-history-") as folder:
        database = Path(folder) / DATABASE
        copy_history(store.path, cluster, database)
        runs = RunStore(database)
        try:
            run_ids = [run.run_id for run in runs.list(cluster)]
        finally:
            runs.close()
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.write(database, DATABASE)
            for run_id in run_ids:
                points, _ = RunFolder(cluster, run_id).read_progress(0, max_points=SERIES_POINTS)
                if points:
                    archive.writestr(f"{RUNS}/{run_id}/{PROGRESS_FILE}",
                                     "".join(json.dumps(point) + "\n" for point in points))
        return out.getvalue()
