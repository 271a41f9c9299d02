"""podmanager/state/store.py: a cluster's spec is stored and read as `ClusterSpec`; a row an
older version wrote (the spec's fields as JSON) reads typed, and one whose spec this version
cannot read still lists, saying why only where the spec is needed; events added in a batch are
written in one transaction."""

from __future__ import annotations

import json
import sqlite3

import pytest

from podmanager.core.errors import SpecError
from podmanager.core.events import EventKind
from podmanager.core.spec import ClusterSpec, parse_spec
from podmanager.state import StateStore

# A cluster row as the version before wrote it: `save_cluster` took the spec's fields as a dict.
OLD_SPEC = {"name": "old", "backend": "simulated", "zones": ["sim-zone-a"],
            "slices": [{"accelerator": "v4-8", "count": 2}]}


def write_row(store: StateStore, name: str, spec_text: str) -> None:
    with sqlite3.connect(store.path) as db:
        db.execute("INSERT INTO clusters (name, spec, backend, status, created_at, updated_at) "
                   "VALUES (?, ?, 'simulated', 'up', 1.0, 2.0)", (name, spec_text))


def test_a_spec_stored_by_the_previous_version_reads_as_the_model() -> None:
    store = StateStore()
    write_row(store, "old", json.dumps(OLD_SPEC))
    record = store.get_cluster("old")
    assert record is not None and isinstance(record.spec, ClusterSpec)
    assert record.spec == parse_spec(OLD_SPEC)
    assert (record.spec.name, [s.count for s in record.spec.slices]) == ("old", [2])


def test_a_spec_saved_reads_back_equal_and_is_stored_as_before() -> None:
    store = StateStore()
    spec = parse_spec(OLD_SPEC)
    store.save_cluster("old", spec, "up")
    record = store.get_cluster("old")
    assert record is not None and record.spec == spec and record.backend == "simulated"
    with sqlite3.connect(store.path) as db:
        (text,) = db.execute("SELECT spec FROM clusters WHERE name='old'").fetchone()
    assert json.loads(text) == spec.model_dump(mode="json")  # an older version reads it as it wrote it


@pytest.mark.parametrize("text, says", [('{"name": "odd", "slices": [], "retired_field": 1}', "retired_field"),
                                        ("not json", "no JSON")])
def test_a_spec_this_version_cannot_read_still_lists_and_says_why_where_it_is_needed(text: str, says: str) -> None:
    store = StateStore()
    write_row(store, "odd", text)
    assert [r.name for r in store.list_clusters()] == ["odd"]
    record = store.get_cluster("odd")
    assert record is not None and record.stored_spec is None and record.status == "up"
    with pytest.raises(SpecError, match=says) as refused:
        record.spec
    assert "stored spec of odd" in refused.value.message and refused.value.exit_code == 2


# Events added inside `StateStore.batch` are written in one transaction: another process sees
# none of them until the block ends, all of them after, also when the block raised.
def test_a_batch_is_seen_whole_at_its_end_and_kept_when_the_block_raises(tmp_path) -> None:
    path = tmp_path / "state.db"
    writer, reader = StateStore(path), StateStore(path)
    try:
        with writer.batch():
            for i in range(3):
                writer.add_event("c", EventKind.SLICE_READY, f"s{i} is READY", slice_index=i)
            assert reader.events("c") == []  # not committed yet: another connection sees none
        assert [e.message for e in reader.events("c")] == ["s0 is READY", "s1 is READY", "s2 is READY"]

        with pytest.raises(RuntimeError):
            with writer.batch():
                writer.add_event("c", EventKind.SLICE_DELETED, "s0 deleted", slice_index=0)
                raise RuntimeError("the loop stopped part-way")
        assert reader.events("c")[-1].message == "s0 deleted"  # recorded: it happened
        writer.add_event("c", EventKind.SLICE_DELETED, "s1 deleted", slice_index=1)  # the store writes on
        assert reader.events("c")[-1].message == "s1 deleted"
    finally:
        writer.close()
        reader.close()
