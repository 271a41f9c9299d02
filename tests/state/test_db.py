"""A damaged state store fails safe: deleted, emptied, truncated or filled with garbage, every
verb names the file and the fix (no raw sqlite traceback), `down` always works (by label),
and `rebuild-state` moves the damaged file aside and rebuilds the store from the clusters'
spec copies, saying what is lost. Driven through the verbs, it is `state/db.py`'s check that
answers; below, its open racing other processes on a new folder."""

from __future__ import annotations

import gc
import multiprocessing
import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from sim_view import sim_nodes
from typer.testing import CliRunner

from podmanager.cli import app
from podmanager.core.errors import StateStoreError
from podmanager.core.events import EventKind
from podmanager.core.spec import parse_spec
from podmanager.core.workload import Workload
from podmanager.state import StateStore, db
from podmanager.state.db import default_path
from podmanager.state.run_records import RunRecord, RunStore

PROGRAM = Workload(command=["true"])  # a record names what its run runs

runner = CliRunner()
NAME = "damaged"
SPEC = f"""
name: {NAME}
zones: [zone-a]
slices: [{{accelerator: v4-8, count: 2}}]
simulation: {{create_latency_s: 0.01, delete_latency_s: 0.01, boot_hosts: false}}
"""


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], prog_name="podmanager")


def delete(path: Path) -> None:
    path.unlink()


def empty(path: Path) -> None:
    os.truncate(path, 0)


def truncate(path: Path) -> None:
    os.truncate(path, 100)  # the header survives, the first page does not


def garbage(path: Path) -> None:
    path.write_bytes(os.urandom(3 * 4096))


DAMAGES = [delete, empty, truncate, garbage]


@pytest.fixture
def spec_file(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC)
    return path


@pytest.fixture
def up(spec_file, podmanager_home):
    """A control-plane-only dry-run cluster with an event log and a finished run on record."""
    result = invoke("up", "-f", spec_file, "--dry-run")
    assert result.exit_code == 0, result.output
    RunStore().create(RunRecord("r-1", NAME, Workload(entrypoint="x.py"), [0], {}, None, status="succeeded"))
    assert len(sim_nodes("podmanager-sim")) == 2
    # The commands ran in this process: close the connections they left, as their processes would
    # have on exit. (The last one to close writes the WAL back into the file, over any damage.)
    gc.collect()
    return spec_file


def assert_clear_store_error(result) -> None:
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception  # not a raw sqlite traceback
    assert "state store" in result.output and str(default_path()) in result.output
    assert "podmanager rebuild-state" in result.output and "down -c NAME" in result.output


@pytest.mark.parametrize("damage", DAMAGES)
def test_every_verb_names_the_damaged_store_and_the_fix(up, damage):
    damage(default_path())
    for verb in (["status", "-c", NAME], ["status"], ["runs", "-c", NAME], ["events", "-c", NAME],
                 ["ray-env", "-c", NAME], ["attach", "r-1", "-c", NAME], ["cancel", "r-1", "-c", NAME],
                 ["run", "-c", NAME, "train.py"], ["sim", "preempt", "-c", NAME, "--slice", "0"],
                 ["up", "-f", up, "--dry-run"]):
        assert_clear_store_error(invoke(*verb))
    # `logs -c NAME` reads the run folders only: it works without the store (this cluster has no run output).
    logs = invoke("logs", "-c", NAME)
    assert logs.exit_code == 2 and "has no runs yet" in logs.output, logs.output
    assert len(sim_nodes("podmanager-sim")) == 2  # nothing was changed meanwhile


@pytest.mark.parametrize("damage, how", [
    (delete, ["-c", NAME]),
    (empty, ["-c", NAME, "--dry-run"]),
    (truncate, ["-f", "SPEC", "--dry-run"]),
    (garbage, ["-c", NAME, "--project", "podmanager-sim", "--zone", "zone-a", "--dry-run"]),
])
def test_down_always_works_by_label_and_says_why(up, damage, how):
    damage(default_path())
    result = invoke("down", *[str(up) if arg == "SPEC" else arg for arg in how])
    assert result.exit_code == 0, result.output
    assert sim_nodes("podmanager-sim") == []
    assert "warning: the state store" in result.output and "rebuild-state" in result.output
    assert f"{NAME} is down" in result.output
    # The cluster is gone for good: a rebuilt store (or, its spec copy gone, a new one) does not know it.
    assert invoke("rebuild-state").exit_code == 0
    assert StateStore().list_clusters() == []


def test_down_without_a_name_asks_for_one_when_the_store_is_damaged(up):
    garbage(default_path())
    result = invoke("down")
    assert result.exit_code == 1 and "-c NAME" in result.output, result.output
    assert len(sim_nodes("podmanager-sim")) == 2


@pytest.mark.parametrize("damage", DAMAGES)
def test_rebuild_moves_the_store_aside_and_restores_clusters_from_their_spec_copies(up, damage, podmanager_home):
    damage(default_path())
    result = invoke("rebuild-state")
    assert result.exit_code == 0, result.output
    assert f"rebuilt: cluster(s) {NAME}" in result.output
    assert "lost: the run history and the event log" in result.output
    aside = sorted(p.name for p in podmanager_home.glob("state.db.damaged-*"))
    if damage is delete:
        assert aside == [] and "is missing" in result.output  # nothing left to move aside
    else:
        assert aside and all(name in result.output for name in aside)

    status = invoke("status", "-c", NAME, "--json")
    assert status.exit_code == 0 and '"READY"' in status.output, status.output
    assert [e.kind for e in StateStore().events(NAME)] == ["state_rebuilt"]
    assert RunStore().list(NAME) == []  # the run history is what is lost
    assert invoke("down", "-c", NAME).exit_code == 0
    assert sim_nodes("podmanager-sim") == []


def test_rebuild_names_clusters_the_simulated_cloud_holds_without_a_spec_copy(up, podmanager_home):
    (podmanager_home / "clusters" / NAME / "spec.json").unlink()
    garbage(default_path())
    result = invoke("rebuild-state")
    assert result.exit_code == 0, result.output
    assert "cluster(s) none" in result.output
    assert f"in simulated project podmanager-sim without a spec copy: {NAME}" in result.output
    assert f"podmanager down -c {NAME} --dry-run" in result.output


def test_rebuild_leaves_a_healthy_store_alone_unless_forced(up, podmanager_home):
    result = invoke("rebuild-state")
    assert result.exit_code == 0 and "nothing to rebuild" in result.output, result.output
    assert not list(podmanager_home.glob("state.db.damaged-*")) and len(RunStore().list(NAME)) == 1

    forced = invoke("rebuild-state", "--force")
    assert forced.exit_code == 0 and f"rebuilt: cluster(s) {NAME}" in forced.output, forced.output
    assert list(podmanager_home.glob("state.db.damaged-*")) and RunStore().list(NAME) == []


def test_a_new_state_folder_is_not_mistaken_for_a_lost_store(podmanager_home):
    store = StateStore()
    assert store.list_clusters() == [] and default_path().exists()


@pytest.mark.parametrize("damage, says", [(delete, "was deleted while this process used it"),
                                          (empty, "emptied"), (truncate, "truncated to 100 bytes")])
def test_a_store_damaged_under_an_open_connection_raises_at_its_next_use(podmanager_home, damage, says):
    """SQLite itself goes on with a deleted file, or with the pages its WAL holds. (A file
    overwritten in place is seen only when SQLite reads a page its WAL does not hold.)"""
    store = StateStore()
    store.save_cluster("c", parse_spec({"name": "c", "backend": "simulated", "slices": [{"accelerator": "v4-8"}]}), "up")
    store.add_event("c", EventKind.UP, "one")
    damage(default_path())
    with pytest.raises(StateStoreError, match=says) as raised:
        store.add_event("c", EventKind.UP, "two")
    assert "podmanager rebuild-state" in str(raised.value)


def test_a_store_replaced_under_an_open_connection_raises(podmanager_home):
    store = StateStore()
    store.save_cluster("c", parse_spec({"name": "c", "backend": "simulated", "slices": [{"accelerator": "v4-8"}]}), "up")
    os.replace(default_path(), podmanager_home / "moved.db")
    StateStore(rebuild=True)  # a new file in its place
    with pytest.raises(StateStoreError, match="was replaced while this process used it"):
        store.events("c")


def test_errors_that_are_not_damage_stay_sqlite_errors(podmanager_home):
    runs = RunStore()
    runs.create(RunRecord("r-1", "c", PROGRAM, [0], {}, None))
    with pytest.raises(sqlite3.IntegrityError):
        runs.create(RunRecord("r-1", "c", PROGRAM, [0], {}, None))


def test_a_second_store_in_one_process_does_not_drop_the_first_ones_locks(podmanager_home):
    """Closing any descriptor of the database drops every POSIX lock this process holds on it:
    another process then checkpoints and deletes the WAL under us, and our next write is lost."""
    query = ("import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
             "print([m for (m,) in c.execute('SELECT message FROM events')]); c.close()")
    store = StateStore()
    store.save_cluster("c", parse_spec({"name": "c", "backend": "simulated", "slices": [{"accelerator": "v4-8"}]}), "up")
    runs = RunStore()  # the same file, a second connection in this process
    runs.list()
    subprocess.run([sys.executable, "-c", query, str(default_path())], check=True)  # opens and closes
    store.add_event("c", EventKind.UP, "written after")
    seen = subprocess.run([sys.executable, "-c", query, str(default_path())], check=True, capture_output=True,
                          text=True).stdout
    assert "written after" in seen


def test_a_store_collected_while_another_opens_does_not_deadlock(podmanager_home):
    """The collector may finalize a dropped store while this thread opens another, inside the
    lock that counts connections (seen as a hang of a test creating many clusters)."""
    StateStore().save_cluster("c", parse_spec({"name": "c", "backend": "simulated", "slices": [{"accelerator": "v4-8"}]}), "up")
    dropped = StateStore()
    done = threading.Event()

    def open_while_collecting() -> None:
        with db._connections_lock:  # as during sqlite3.connect when the collector runs
            dropped._db._finalizer()
        done.set()

    threading.Thread(target=open_while_collecting, daemon=True).start()
    assert done.wait(timeout=30), "the finalizer blocked on the lock its own thread holds"
    assert [c.name for c in StateStore().list_clusters()] == ["c"]


# Commands started at the same moment on a new state folder all open its store: SQLite
# answers one of the processes that switch a new database to WAL "database is locked" at once
# (no busy wait breaks that deadlock), and the store tries again instead of failing.
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
