"""Which slice indexes an edited spec keeps, when fewer spares would drop a run's slice (pure).

A slice keeps its index for life, and a swap makes a spare a run's slice (core/spares.py): a
group `{count: 2, spares: 1}` is slices 0-2 with 2 the spare; a run on 0 and 1 that loses 0
goes on on 1 and 2, and 0 is the spare. Numbered anew with `spares: 0`, the group is 0 and 1,
so `up` would delete the run's slice 2 and keep the idle 0. Instead the idle slice's index is
retired (`ClusterSpec.retired_slices`, which numbering passes over): the group is 1 and 2, and
0 is deleted. Which idle slice: a recorded spare first, else the highest idle index, below the
run's slice and of its accelerator (the fewest slices change groups). A run's slice that no idle
one can make room for is left to `up`'s refusal, as before.

Only for fewer spares: an edit that lowers a group's `count` (or changes the groups) drops the
slices its numbering drops, and a run on one is refused unless `--force`, as always.
"""

from __future__ import annotations

from collections.abc import Iterable

from podmanager.core.spec import ClusterSpec


def kinds(spec: ClusterSpec) -> dict[int, str]:
    """slice index -> its accelerator, as the spec numbers its slices."""
    return {s.index: s.accelerator.name for s in spec.slice_list()}


def retire_idle(spec: ClusterSpec, previous: ClusterSpec | None, busy: Iterable[int],
                spares: Iterable[int]) -> list[int]:
    """`spec`'s retired slices: `previous`'s (the spec the last `up` stored; None: none) and
    its own, then, for each active run's slice (`busy`) the new numbering would drop or give
    another accelerator, one idle slice retired in its place where one can be (module
    docstring). `spares`: the recorded spares, retired first."""
    retired = set(spec.retired_slices) | set(previous.retired_slices if previous is not None else [])
    if previous is None or not _fewer_spares_only(spec, previous):
        return sorted(retired)
    was = kinds(previous)
    busy, spares = set(busy), set(spares)
    held = sorted(i for i in busy if i in was)  # a slice the last up's spec lacked: nothing known of it

    def kept(numbering: set[int]) -> set[int]:
        """The runs' slices this numbering keeps, each as the accelerator it is."""
        layout = kinds(spec.model_copy(update={"retired_slices": sorted(numbering)}))
        return {i for i in held if layout.get(i) == was[i]}

    for slice_index in held:
        now = kept(retired)
        if slice_index in now:
            continue
        layout = kinds(spec.model_copy(update={"retired_slices": sorted(retired)}))
        idle = [i for i, kind in layout.items() if i < slice_index and kind == was[slice_index] and i not in busy]
        for candidate in sorted(idle, key=lambda i: (i in spares, i), reverse=True):
            if kept(retired | {candidate}) >= now | {slice_index}:  # room made, no other run's slice lost
                retired.add(candidate)
                break
    return sorted(retired)


def _fewer_spares_only(spec: ClusterSpec, previous: ClusterSpec) -> bool:
    """The same groups (accelerators, in order), none with a lower count: what shrinks is spares."""
    return len(spec.slices) == len(previous.slices) and all(
        new.accelerator == old.accelerator and new.count >= old.count
        for new, old in zip(spec.slices, previous.slices))
