"""Event kinds are `EventKind` members everywhere: the store refuses any other, every call
site in the package names a member, and the CLI's filters are made of members."""

from __future__ import annotations

import ast
import json
import sqlite3
from pathlib import Path

import pytest

from podmanager.cli.follow import RUN_EVENTS
from podmanager.core.events import EventKind
from podmanager.state import StateStore

PACKAGE = Path(__file__).resolve().parents[2] / "podmanager"
assert (PACKAGE / "__init__.py").is_file(), PACKAGE  # a walk over no files would prove nothing
# The callables that take an event's kind, and at which position.
WRITERS = {"record": 0, "_event": 0, "add_event": 1}


def test_a_misspelt_kind_is_refused_and_nothing_is_recorded(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state.db")
    with pytest.raises(TypeError, match="slice_redy"):
        store.add_event("c", "slice_redy", "a typo")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="EventKind"):
        store.add_event("c", "slice_ready", "right text, but no member")  # type: ignore[arg-type]
    assert store.events("c") == []


def test_a_member_is_stored_as_its_old_string_and_an_old_log_reads_the_same(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state.db")
    store.add_event("c", EventKind.SLICE_READY, "ready", slice_index=0)
    store.close()
    with sqlite3.connect(tmp_path / "state.db") as db:  # a log written before the enum, with a kind gone since
        db.execute("INSERT INTO events (cluster, time, kind, slice_index, message, data) VALUES (?, ?, ?, ?, ?, ?)",
                   ("c", 1.0, "retired_kind", None, "old", json.dumps({})))
        assert [row[0] for row in db.execute("SELECT kind FROM events ORDER BY id")] == ["slice_ready", "retired_kind"]
    events = StateStore(tmp_path / "state.db").events("c")
    assert [e.kind for e in events] == ["slice_ready", "retired_kind"]
    assert events[0].kind == EventKind.SLICE_READY
    assert [e.kind for e in StateStore(tmp_path / "state.db").events("c", kind=EventKind.SLICE_READY)] == ["slice_ready"]


def test_a_member_prints_as_its_value() -> None:
    # Renderers put kinds in f-strings: "slice_ready", never "EventKind.SLICE_READY".
    assert f"{EventKind.SLICE_READY}" == "slice_ready" == str(EventKind.SLICE_READY)


def test_the_cli_filters_are_members() -> None:
    assert RUN_EVENTS and all(isinstance(kind, EventKind) for kind in RUN_EVENTS)


def kinds_written_as_bare_strings() -> list[str]:
    found = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            at = WRITERS.get(name or "")
            if at is not None and len(node.args) > at and isinstance(node.args[at], ast.Constant):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.args[at].value!r}")
    return found


def test_every_call_site_names_a_member() -> None:
    assert kinds_written_as_bare_strings() == []
