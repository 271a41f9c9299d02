"""Events added inside `StateStore.batch` are written in one transaction: another process sees
none of them until the block ends, all of them after, also when the block raised."""

from __future__ import annotations

import pytest

from podmanager.core.events import EventKind
from podmanager.state.store import StateStore


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
