"""`write_atomic`: a reader of the file sees the old content or the new, never part of it, and
nothing is left beside it, whether the write succeeds, fails or races another."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from podmanager.core import files
from podmanager.core.files import write_atomic

OLD = "old " * 50_000
NEW = "new " * 50_000


def test_the_new_content_replaces_the_old_and_nothing_else_is_left(tmp_path):
    target = tmp_path / "state.json"
    write_atomic(target, OLD)
    write_atomic(target, NEW)
    assert target.read_text() == NEW
    assert list(tmp_path.iterdir()) == [target]


def test_until_the_rename_the_target_has_the_old_content_whole(tmp_path, monkeypatch):
    target = tmp_path / "state.json"
    target.write_text(OLD)
    rename = files.os.replace
    seen = []

    def replace(source, destination):
        seen.append((target.read_text(), Path(source).read_text(), Path(source).parent))  # the moment before the rename
        rename(source, destination)

    monkeypatch.setattr(files.os, "replace", replace)
    write_atomic(target, NEW)
    assert seen == [(OLD, NEW, tmp_path)]  # the new content written whole, beside the target
    assert target.read_text() == NEW and list(tmp_path.iterdir()) == [target]


def test_a_failed_write_keeps_the_old_content_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    target = tmp_path / "state.json"
    target.write_text(OLD)

    def replace(source, destination):
        raise OSError("disk full")

    monkeypatch.setattr(files.os, "replace", replace)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(target, NEW)
    assert target.read_text() == OLD
    assert list(tmp_path.iterdir()) == [target]


def test_readers_racing_two_writers_only_ever_see_a_whole_version(tmp_path):
    target = tmp_path / "state.json"
    write_atomic(target, OLD)

    def write(text: str) -> None:
        for _ in range(200):
            write_atomic(target, text)

    writers = [threading.Thread(target=write, args=(text,)) for text in (OLD, NEW)]
    for writer in writers:
        writer.start()
    reads = 0
    while any(w.is_alive() for w in writers) or reads == 0:
        assert target.read_text() in (OLD, NEW)
        reads += 1
    for writer in writers:
        writer.join()
    assert target.read_text() in (OLD, NEW)
    assert list(tmp_path.iterdir()) == [target]  # each writer's temporary file was its own


def test_bytes_are_written_as_they_are(tmp_path):
    target = tmp_path / "podmanager-0.1.0-py3-none-any.whl"
    write_atomic(target, b"PK\x03\x04\x00\xff")
    assert target.read_bytes() == b"PK\x03\x04\x00\xff"
    assert list(tmp_path.iterdir()) == [target]
