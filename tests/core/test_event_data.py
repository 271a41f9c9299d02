"""An event's fields are typed per kind (`core/event_data.py`): checked where they are
written, kept in the log as the same JSON as before, and an old row of any shape still reads."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from pydantic import ValidationError

from podmanager.core.event_data import (
    PAYLOADS,
    EventData,
    NodeData,
    OldEventData,
    SlicesData,
)
from podmanager.core.events import EventKind
from podmanager.state import StateStore


def test_every_kind_has_a_record():
    assert set(PAYLOADS) == set(EventKind)
    assert all(issubclass(record, EventData) for record in PAYLOADS.values())


def test_a_misspelt_or_mistyped_field_is_refused_where_it_is_written_and_nothing_is_recorded(tmp_path: Path):
    store = StateStore(tmp_path / "state.db")
    with pytest.raises(ValidationError, match="zonee"):
        store.add_event("c", EventKind.SLICE_READY, "ready", node="c-s0", zonee="z")
    with pytest.raises(ValidationError, match="slices"):
        store.add_event("c", EventKind.RUN_SHRUNK, "shrunk", slices="0,1")
    with pytest.raises(ValidationError, match="node"):  # a kind with no fields of its own takes only the run
        store.add_event("c", EventKind.UP, "up", node="c-s0")
    assert store.events("c") == []


def test_fields_read_back_typed_and_are_kept_as_the_same_json_as_before(tmp_path: Path):
    store = StateStore(tmp_path / "state.db")
    written = store.add_event("c", EventKind.SPARE_SWAPPED, "swapped", run_id="r1", lost=1, spare=3, slices=[0, 3])
    store.add_event("c", EventKind.SLICE_WAITING, "waiting", node="c-s0", zone="z", state="CREATING")
    swapped, waiting = store.events("c")
    assert isinstance(swapped.data, SlicesData) and swapped.data == written.data
    assert (swapped.run_id, swapped.data.spare, swapped.data.slices) == ("r1", 3, [0, 3])
    assert isinstance(waiting.data, NodeData) and waiting.data.state == "CREATING"
    store.close()
    with sqlite3.connect(tmp_path / "state.db") as db:  # only the fields given, as JSON: the log as before
        rows = [json.loads(data) for (data,) in db.execute("SELECT data FROM events ORDER BY id")]
    assert rows == [{"run_id": "r1", "lost": 1, "spare": 3, "slices": [0, 3]},
                    {"node": "c-s0", "zone": "z", "state": "CREATING"}]
    assert swapped.as_dict()["data"] == rows[0]


def test_old_rows_of_any_shape_still_read_as_they_were(tmp_path: Path):
    store = StateStore(tmp_path / "state.db")
    store.close()
    old = [("slice_ready", {"node": "c-s0", "zone": "z"}),  # as this version writes it
           ("slice_deleting", {"node": "c-s1", "detail": "a field no kind holds now"}),
           ("run_shrunk", {"run_id": "r1", "slices": "0,1"}),  # a field of another type then
           ("retired_kind", {"anything": {"nested": [1, 2]}}),  # a kind no longer written
           ("up", {})]
    with sqlite3.connect(tmp_path / "state.db") as db:
        db.executemany("INSERT INTO events (cluster, time, kind, slice_index, message, data) VALUES (?, ?, ?, ?, ?, ?)",
                       [("c", 1.0, kind, None, "old", json.dumps(data)) for kind, data in old])
    events = StateStore(tmp_path / "state.db").events("c")
    assert [e.data.as_json() for e in events] == [data for _, data in old]
    assert isinstance(events[0].data, NodeData) and events[0].data.node == "c-s0"
    assert [type(e.data) for e in events[1:4]] == [OldEventData] * 3
    assert events[2].run_id == "r1"  # the run an old row names is still found by it
    assert [e.as_dict().get("data") for e in events] == [data or None for _, data in old]
