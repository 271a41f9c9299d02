"""Hot spares: which of a cluster's slices wait idle to take a lost slice's place at once.

A slice keeps its index and node name (`<cluster>-s<index>`) for its whole life; whether it
is a spare is a role, recorded in the state store (`state/run_records.py`, beside the runs, so a
swap moves one slice from a run to the spares and the spare to the run in one transaction).
A group `{accelerator: v4-8, count: 2, spares: 1}` has three indexes; at first the last one
is the spare. When a run loses slice 0, the ready spare 2 becomes the run's slice and 0
becomes the spare, made again in the background. So `down`, selectors and the reconcile loop
see the same slices as ever; only the runs' slice lists and the spare set change.

Pure functions over the spec and the recorded roles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from podmanager.core.spec import ClusterSpec


@dataclass(frozen=True)
class SpareGroup:
    """One slice group's indexes and how many of them are spares."""

    accelerator: str
    indexes: tuple[int, ...]
    spares: int


def groups(spec: ClusterSpec) -> list[SpareGroup]:
    """The groups in spec order, their indexes numbered as `ClusterSpec.slice_list` numbers them
    (past its retired slices)."""
    instances = spec.slice_list()
    out: list[SpareGroup] = []
    start = 0
    for group in spec.slices:
        size = group.count + group.spares
        out.append(SpareGroup(group.accelerator, tuple(s.index for s in instances[start:start + size]), group.spares))
        start += size
    return out


def assign(spec: ClusterSpec, recorded: Iterable[int], busy: Iterable[int] = ()) -> list[int]:
    """The spare indexes for `spec`: per group, those recorded that are still in it (up to its
    `spares`), then its highest indexes that no active run holds (`busy`). A spec that asks for
    fewer spares keeps the lowest recorded ones; a group whose every slice is busy gets fewer."""
    recorded, busy = set(recorded), set(busy)
    out: list[int] = []
    for group in groups(spec):
        chosen = [i for i in group.indexes if i in recorded and i not in busy][:group.spares]
        for index in reversed(group.indexes):
            if len(chosen) >= group.spares:
                break
            if index not in busy and index not in chosen:
                chosen.append(index)
        out += chosen
    return sorted(out)


def working(spec: ClusterSpec, spares: Iterable[int]) -> list[int]:
    """Every slice that is not a spare: what a run gets when it names none."""
    spare = set(spares)
    return [s.index for s in spec.slice_list() if s.index not in spare]


def pick(spec: ClusterSpec, lost: int, spares: Iterable[int], ready: Callable[[int], bool]) -> int | None:
    """A spare of the same accelerator as slice `lost` that is `ready` (READY, hosts joined), or None."""
    kinds = {s.index: s.accelerator.name for s in spec.slice_list()}
    for spare in sorted(spares):
        if spare != lost and kinds.get(spare) == kinds.get(lost) and ready(spare):
            return spare
    return None


def describe_cost(spec: ClusterSpec) -> str | None:
    """What the spares cost, for `up`'s plan: '1 spare slice (v4-8) holds 4 of the cluster's 12
    chips idle'; None without spares."""
    instances = spec.slice_list()
    spare_groups = [g for g in groups(spec) if g.spares]
    if not spare_groups:
        return None
    chips = {s.index: s.accelerator.chips for s in instances}
    idle = sum(chips[i] for g in spare_groups for i in g.indexes[-g.spares:])
    count = sum(g.spares for g in spare_groups)
    kinds = ", ".join(f"{g.spares} x {g.accelerator}" for g in spare_groups)
    return (f"{count} spare slice{'s' if count > 1 else ''} ({kinds}) hold{'s' if count == 1 else ''} "
            f"{idle} of the cluster's {sum(chips.values())} chips idle, ready to replace a lost slice at once")
