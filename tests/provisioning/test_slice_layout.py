"""Fewer spares (or slices) that would drop an active run's slice retire an idle slice instead
(`provisioning/slice_layout.py`), so `up` deletes the idle one and never the run's. Pure: specs,
the runs' slices and the recorded spares in, the retired indexes and the numbering out."""

from __future__ import annotations

import pytest

from podmanager.core.spec import parse_spec
from podmanager.provisioning.slice_layout import retire_idle


def spec(*groups: tuple[str, int, int], retired: list[int] | None = None):
    return parse_spec({"name": "c", "backend": "simulated", "zones": ["z"],
                       "slices": [{"accelerator": a, "count": n, "spares": s} for a, n, s in groups],
                       **({"retired_slices": retired} if retired else {})})


V8_2_1 = ("v4-8", 2, 1)
V8_2_0 = ("v4-8", 2, 0)


@pytest.mark.parametrize("case, before, after, busy, spares, retired, numbering", [
    # The issue's: the run lost slice 0 and took the spare 2; 0 is now the spare. `spares: 0`
    # drops 0, the idle one, not the run's 2.
    ("a spare dropped after a swap", [V8_2_1], [V8_2_0], [1, 2], [0], [0], [1, 2]),
    ("a spare dropped without a swap", [V8_2_1], [V8_2_0], [0, 1], [2], [], [0, 1]),
    ("no run: numbering as written", [V8_2_1], [V8_2_0], [], [0], [], [0, 1]),
    # A group after it keeps its indexes too: without the retirement the run's v4-8 slice 2 would
    # take the v4-16 group's first place.
    ("a later group", [V8_2_1, ("v4-16", 1, 0)], [V8_2_0, ("v4-16", 1, 0)], [1, 2, 3], [0], [0], [1, 2, 3]),
    # A recorded spare goes before an idle working slice, even a higher one.
    ("the spare first", [("v4-8", 3, 1)], [("v4-8", 3, 0)], [2, 3], [0], [0], [1, 2, 3]),
    # Only as many as there are idle slices below: the rest is up's refusal, as before.
    ("no room for all", [("v4-8", 1, 2)], [("v4-8", 1, 0)], [1, 2], [0], [0], [1]),
    # Fewer slices (a lower count) drop what the numbering drops: a run there is refused, as before.
    ("a lower count", [("v4-8", 3, 0)], [V8_2_0], [1, 2], [], [], [0, 1]),
    ("a lower count and fewer spares", [V8_2_1], [("v4-8", 1, 0)], [1, 2], [0], [], [0]),
    # A group after it keeps its indexes too (above); a group before it that drops a spare does too.
    ("a group before", [("v4-16", 1, 1), ("v4-8", 1, 0)], [("v4-16", 1, 0), ("v4-8", 1, 0)], [1, 2], [0], [0],
     [1, 2]),
    # An idle slice of another accelerator makes no room for a run's v4-8 slice.
    ("another accelerator", [("v4-16", 1, 0), ("v4-8", 1, 1)], [("v4-16", 1, 0), ("v4-8", 1, 0)], [2], [1], [1],
     [0, 2]),
])
def test_which_slices_an_edit_keeps(case, before, after, busy, spares, retired, numbering):
    found = retire_idle(spec(*after), spec(*before), busy, spares)
    assert found == retired, case
    assert [s.index for s in spec(*after, retired=found).slice_list()] == numbering, case


def test_a_retired_slice_stays_retired_while_the_spec_file_does_not_name_it():
    # The next `up` of the same file: the numbering stays as the last up left it.
    after_the_drop = spec(V8_2_0, retired=[0])
    assert retire_idle(spec(V8_2_0), after_the_drop, [1, 2], []) == [0]
    assert retire_idle(spec(V8_2_0), after_the_drop, [], []) == [0]  # the run over: still, nothing to move


def test_a_first_up_retires_nothing():
    assert retire_idle(spec(V8_2_0), None, [1, 2], [0]) == []
