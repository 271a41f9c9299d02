"""A run's timeline (`state/run_timeline.py`) read from wherever the cluster's records are (this
machine, or its controller over the channel), and written as one standalone HTML file for a bug
report or a post-mortem (`podmanager timeline RUN --html FILE`)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from podmanager.attempts.logs import RunFolder
from podmanager.channel import page_files
from podmanager.core.errors import SpecError
from podmanager.state import StateStore
from podmanager.state.run_records import RunRecord, RunStore
from podmanager.state.run_timeline import MARK_KINDS, RunTimeline, of_record

# A slice's notice names no run: the events of the run's time, any run's, are read and the
# timeline keeps those of its own slices.
_MARGIN_S = 60.0
MAX_SERIES_POINTS = 2000


def run_timeline(cluster: str, run_id: str) -> RunTimeline:
    """The run's timeline now (a live run's up to this moment)."""
    from podmanager.client.remote import RemoteCluster, is_remote

    if is_remote(cluster):
        with RemoteCluster(cluster) as remote:
            run = remote.run_handle(run_id).status()
            events = remote.events()
        return of_record(run, events, now=time.time())
    store, runs, _ = _records(cluster)
    run = _local_run(cluster, run_id, runs)
    return local_timeline(store, run, now=time.time())


def _records(cluster: str) -> tuple[StateStore, RunStore, Path | None]:
    """Where the cluster's records are on this machine: the store (a local controller's, also
    after `down`), or the copy `down` kept of a controller VM's; and where its runs' folders are
    (None: the cluster's own)."""
    from podmanager.client.kept_history import kept

    store = StateStore()
    found = kept(cluster) if store.get_cluster(cluster) is None else None
    if found is None:
        return store, RunStore(store.path), None
    return StateStore(found.database, folder=found.folder), RunStore(found.database), found.runs_root


def local_timeline(store: StateStore, run: RunRecord, *, now: float) -> RunTimeline:
    """The timeline of a run whose records are in `store` (this machine's, or the controller's)."""
    first = run.ledger.attempts[0] if run.ledger.attempts else None
    since = min(run.created_at, first.started - first.setup_s if first else run.created_at) - _MARGIN_S
    until = None if not run.finished else run.updated_at + _MARGIN_S
    events = store.events_page(run.cluster, kinds=tuple(MARK_KINDS), since=since, until=until, limit=10_000,
                               newest_first=False)
    return of_record(run, events, now=now)


def _local_run(cluster: str, run_id: str, runs: RunStore) -> RunRecord:
    found = runs.get(run_id)
    if found is None or found.cluster != cluster:
        known = ", ".join(r.run_id for r in runs.list(cluster)[-5:]) or "none"
        raise SpecError(f"RUN: no run {run_id!r} in cluster {cluster} (latest: {known})",
                        hint="'podmanager runs' lists them.")
    return found


def timeline_html(cluster: str, run_id: str) -> str:
    """The standalone file: the timeline, and the run's metric series when its folder is here."""
    from podmanager.client.remote import is_remote

    timeline = run_timeline(cluster, run_id)
    data = timeline.model_dump(mode="json")
    if not is_remote(cluster):
        root = _records(cluster)[2]
        data["series"], _ = RunFolder(cluster, run_id, root=root).read_progress(0, max_points=MAX_SERIES_POINTS)
    return page_files.standalone_timeline(json.dumps(data), f"run {timeline.run_id} of {cluster}")


def write_timeline_html(cluster: str, run_id: str, path: Path) -> Path:
    """The run's timeline as one HTML file at `path` (replaced if there); its folder must exist."""
    if path.is_dir():
        raise SpecError(f"--html: {path} is a folder; name the file to write, e.g. {path / (run_id + '.html')}")
    if not path.parent.is_dir():
        raise SpecError(f"--html: the folder {path.parent} does not exist", hint="Create it, or name another file.")
    text = timeline_html(cluster, run_id)  # before the file is touched: a bad RUN writes nothing
    path.write_text(text, encoding="utf-8")
    return path
