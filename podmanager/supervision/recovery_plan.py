"""What to do after an attempt failed (pure): stop, swap hot spares in, go on at once with the
slices left (an elastic run), replace the lost slices, or relaunch on the same ones.

The supervisor classifies the failure (`classify.py`), reads what the plan weighs (the budgets'
history and the time, the run's slices, the hot spares ready now) and carries the decision
out; nothing here calls the cloud, Ray, the store or the clock. A swap can still fail when it
is carried out (another run took that spare meanwhile): the supervisor then plans again with
that spare gone and the swaps already made.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from podmanager.core import spares
from podmanager.core.errors import PodmanagerError
from podmanager.core.spec import ClusterSpec
from podmanager.core.workload import check_parallelism
from podmanager.supervision.classify import Cause, Incident
from podmanager.supervision.policy import (
    RecoveryPolicy,
    RecoveryState,
    quarantined,
    slices_left,
)


@dataclass(frozen=True)
class Failure:
    """An attempt that ended badly, as classify concluded."""

    attempt: int
    incident: Incident  # the cause, the slices to replace (none: relaunch), the host that failed


@dataclass(frozen=True)
class RunSlices:
    """The run's slices as the plan needs them."""

    slices: tuple[int, ...]  # the run's slices now (a spare already swapped in counts as the run's)
    working: tuple[int, ...]  # those the failed attempt ran on: fewer while an elastic run is shrunk
    min_slices: int | None = None  # `--min-slices`: None, the run never goes on with fewer
    parallelism: str | None = None  # the program's mesh, which must fit the chips of the slices left


@dataclass(frozen=True)
class Stop:
    """The run ends: a budget or the deadline is spent."""

    reason: str

    @property
    def why(self) -> str:
        return self.reason


@dataclass(frozen=True)
class Shrink:
    """An elastic run goes on at once on the slices left; those missing are made again meanwhile."""

    attempt: int
    on_slices: tuple[int, ...]
    lost: tuple[int, ...]  # this failure's slices that no spare took
    make_again: tuple[int, ...]  # every slice of the run the next attempt goes without
    why: str
    wait_s: float = 0.0


@dataclass(frozen=True)
class Replace:
    """Delete these slices, create them again, wait for their hosts, then launch `attempt`."""

    attempt: int
    slices: tuple[int, ...]
    reason: str  # the cause, kept in the run's `Replacing` phase
    why: str
    wait_s: float = 0.0


@dataclass(frozen=True)
class Relaunch:
    """Launch `attempt` at once on the slices the run has (a shrunk run stays so)."""

    attempt: int
    on_slices: tuple[int, ...] | None  # None: all the run's slices
    why: str
    wait_s: float = 0.0


@dataclass(frozen=True)
class Swap:
    """Give the run these ready spares in place of lost slices (lost -> spare), then `then`."""

    spares: tuple[tuple[int, int], ...]
    then: Shrink | Replace | Relaunch
    why: str


Action = Stop | Shrink | Replace | Relaunch  # what the supervisor does once the swaps are made
Plan = Swap | Action


def plan_recovery(failure: Failure, *, policy: RecoveryPolicy, history: RecoveryState, run: RunSlices,
                  spec: ClusterSpec, ready_spares: Iterable[int] = (),
                  swapped: Mapping[int, int] | None = None) -> Plan:
    """The decision after `failure`. `history`: the run's incidents with this one last, and the
    time now (the budgets and the backoff count from it). `ready_spares`: hot spares READY with
    every host's agent healthy and free to take. `swapped`: swaps already made for this failure."""
    verdict = policy.decide(history)
    if not verdict.retry:
        return Stop(verdict.reason or "the recovery policy says stop")
    incident, attempt, wait_s = failure.incident, failure.attempt + 1, verdict.wait_s
    done = dict(swapped or {})
    new = _pick_spares(spec, swappable(incident), done, ready_spares)
    every_swap = {**done, **new}
    replace = tuple(sorted((set(incident.slices) | quarantined(history)) - set(every_swap)))
    working = [every_swap.get(i, i) for i in run.working]
    slices = [every_swap.get(i, i) for i in run.slices]
    going_on = slices_left(working, list(replace), run.min_slices, lambda left: _fits(spec, run.parallelism, left)) \
        if incident.cause is Cause.PREEMPTION else None
    then: Shrink | Replace | Relaunch
    if going_on is not None:
        then = Shrink(attempt, tuple(going_on), replace, tuple(sorted(set(slices) - set(going_on))),
                      f"{incident.cause.value}: slice(s) {list(replace)} lost, no spare ready, and "
                      f"{len(going_on)} slice(s) left is at least --min-slices {run.min_slices}", wait_s)
    elif replace:
        then = Replace(attempt, replace, incident.cause.value,
                       f"{incident.cause.value}: slice(s) {list(replace)} to make again"
                       + (" (no spare ready)" if incident.cause is Cause.PREEMPTION else ""), wait_s)
    else:
        shrunk = set(working) != set(slices)  # a shrunk run stays so until its slices are back
        then = Relaunch(attempt, tuple(working) if shrunk else None,
                        f"{incident.cause.value}: " + ("every lost slice has a spare in its place" if every_swap
                                                       else "nothing to replace") + "; relaunch"
                        + (f" on the {len(working)} slice(s) left" if shrunk else ""), wait_s)
    if new:
        pairs = tuple(sorted(new.items()))
        return Swap(pairs, then, "ready hot spare(s) take the place of lost slice(s) "
                    + ", ".join(f"{lost} -> {spare}" for lost, spare in pairs))
    return then


def swappable(incident: Incident) -> frozenset[int]:
    """The lost slices a hot spare may take the place of: only those the cloud took. A
    quarantined or unhealthy slice left as a spare would look ready and never be made again."""
    return incident.slices if incident.cause is Cause.PREEMPTION else frozenset()


def stop_for_dropped(dropped: list[int]) -> Stop | None:
    """The run cannot go on when an `up` of an edited spec took some of its slices: they are not
    the run's to create again (nothing is paid, nothing replaced). None: none was taken."""
    if not dropped:
        return None
    return Stop(f"slice(s) {dropped} of the run are no longer in the cluster's spec (an 'up' of an edited "
                "spec removed them); they are not created again")


def _pick_spares(spec: ClusterSpec, lost_slices: frozenset[int], done: Mapping[int, int],
                 ready: Iterable[int]) -> dict[int, int]:
    """A ready spare of the same accelerator for each lost slice not swapped yet (lowest first)."""
    free = [s for s in ready if s not in done.values()]
    picked: dict[int, int] = {}
    for lost in sorted(lost_slices):
        if lost in done:
            continue
        spare = spares.pick(spec, lost, [s for s in free if s not in picked.values()], lambda index: True)
        if spare is not None:
            picked[lost] = spare
    return picked


def _fits(spec: ClusterSpec, parallelism: str | None, slices: list[int]) -> bool:
    """The program's mesh fits these slices' chips (a mesh of fixed size fits only all of them)."""
    if not parallelism:
        return True
    chips = sum(s.accelerator.chips for s in spec.slice_list() if s.index in slices)
    try:
        check_parallelism(parallelism, chips)
    except PodmanagerError:
        return False
    return True
