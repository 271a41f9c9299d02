"""The recovery plan (supervision/recovery_plan.py) over a table of cases: every way the
supervisor recovered from a failed attempt (spares, elastic runs, budgets, services, notices,
program failures). Pure: no cluster, no store, no clock."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from podmanager.cloud.base import NodeState
from podmanager.core.spec import RecoverySpec, parse_spec
from podmanager.runtime.contract import EXIT_PREEMPTED
from podmanager.supervision.classify import (
    Cause,
    HostOutcome,
    Incident,
    Observation,
    classify,
)
from podmanager.supervision.policy import RecoveryPolicy, RecoveryState
from podmanager.supervision.recovery_plan import (
    Failure,
    Plan,
    Relaunch,
    Replace,
    RunSlices,
    Shrink,
    Stop,
    Swap,
    plan_recovery,
    stop_for_dropped,
)

BACKOFF_S = 2.0


def preempted(*slices: int) -> Incident:
    return Incident(Cause.PREEMPTION, frozenset(slices), f"cloud reports slice(s) {list(slices)} PREEMPTED")


def program(host: tuple[int, int] = (1, 0)) -> Incident:
    return Incident(Cause.PROGRAM, frozenset(), "slice-1/host-0 exited with code 3", host)


def infrastructure(*slices: int, host: tuple[int, int] | None = None) -> Incident:
    return Incident(Cause.INFRASTRUCTURE, frozenset(slices), "cloud reports slice 1: READY (UNHEALTHY) for too long",
                    host)


HANG = Incident(Cause.HANG, frozenset(), "no training step within the hang timeout")


def seen(exits: tuple[int, int], notices: frozenset[int] = frozenset()) -> Incident:
    """What classify concludes from two one-host slices that exited so, READY, with these notices."""
    return classify(Observation(hosts=tuple(HostOutcome(i, 0, code) for i, code in enumerate(exits)),
                                slice_states={0: NodeState.READY, 1: NodeState.READY}, notices=notices))


@dataclass(frozen=True)
class Case:
    words: str
    incident: Incident
    expected: Plan
    earlier: tuple[Incident, ...] = ()  # the run's incidents before this one
    slices: tuple[int, ...] = (0, 1)  # the run's slices
    working: tuple[int, ...] | None = None  # the failed attempt's (None: all the run's)
    min_slices: int | None = None
    parallelism: str | None = None
    groups: tuple[dict, ...] = ({"accelerator": "v4-8", "count": 2, "spares": 1},)  # slices 0, 1; spare 2
    ready: tuple[int, ...] = ()  # spares ready to take
    swapped: dict[int, int] = field(default_factory=dict)  # swaps made before this planning
    budgets: dict = field(default_factory=dict)
    elapsed_s: float = 60.0  # since the run started


# The expected decisions; each decision's `why` is checked apart (test_every_decision_says_why).
def relaunch(on: tuple[int, ...] | None = None, wait: float = BACKOFF_S) -> Relaunch:
    return Relaunch(1, on, "", wait)


def replace(*slices: int, cause: Cause = Cause.PREEMPTION, wait: float = 0.0) -> Replace:
    return Replace(1, slices, cause.value, "", wait)


def shrink(on: tuple[int, ...], lost: tuple[int, ...], again: tuple[int, ...]) -> Shrink:
    return Shrink(1, on, lost, again, "")


def swap(pairs: tuple[tuple[int, int], ...], then: Shrink | Replace | Relaunch) -> Swap:
    return Swap(pairs, then, "")


TWO_KINDS = ({"accelerator": "v4-8", "count": 2}, {"accelerator": "v4-16", "count": 1, "spares": 1})  # spare 3
REPLICAS = ({"accelerator": "v4-8", "count": 2, "spares": 2},)  # two one-slice replicas (0, 1), spares 2 and 3

CASES = [
    # ---- spares
    Case("a preempted slice and a ready spare of its accelerator: the spare takes its place and the run "
         "relaunches at once on its slices with the spare, nothing replaced",
         preempted(1), swap(((1, 2),), relaunch(wait=0.0)), ready=(2,)),
    Case("a preempted slice and no spare ready: the slice is replaced (deleted, created again) before the relaunch",
         preempted(1), replace(1)),
    Case("a preempted slice whose only ready spare is of another accelerator: replaced, not swapped",
         preempted(1), replace(1), groups=TWO_KINDS, ready=(3,)),
    Case("two slices preempted and one spare ready: the lower one swapped, the other replaced",
         preempted(0, 1), swap(((0, 2),), replace(1)), ready=(2,)),
    Case("planned again after its spare 0 -> 2 was made and no other is ready: the other lost slice replaced",
         preempted(0, 1), replace(1), slices=(1, 2), swapped={0: 2}),
    Case("an unhealthy slice (infrastructure) is replaced, never swapped, though a spare is ready: no broken "
         "slice becomes a spare",
         infrastructure(1), replace(1, cause=Cause.INFRASTRUCTURE, wait=BACKOFF_S), ready=(2,)),
    Case("a program failure with a spare ready: relaunched on the same slices after the backoff, no swap",
         program(), relaunch(), ready=(2,)),
    # ---- services: each replica is a run on one slice
    Case("a replica's slice preempted, spares 2 and 3 ready: spare 2 takes its place",
         preempted(0), swap(((0, 2),), relaunch(wait=0.0)), slices=(0,), groups=REPLICAS, ready=(2, 3)),
    Case("a replica's slice preempted after another replica took spare 2: spare 3 takes its place",
         preempted(0), swap(((0, 3),), relaunch(wait=0.0)), slices=(0,), groups=REPLICAS, ready=(3,)),
    Case("a replica whose program failed: relaunched on its own slice, no spare taken",
         program((0, 0)), relaunch(), slices=(0,), groups=REPLICAS, ready=(2, 3)),
    # ---- elastic runs (--min-slices)
    Case("an elastic run (--min-slices 1) loses a slice with no spare ready: it goes on at once on the slice "
         "left while the lost one is made again",
         preempted(1), shrink((0,), (1,), (1,)), min_slices=1),
    Case("an elastic run at its minimum (--min-slices 2 of 2): it waits for the replacement like any run",
         preempted(1), replace(1), min_slices=2),
    Case("an elastic run whose mesh fits only all its chips (data=8 on two v4-8): it waits for the replacement",
         preempted(1), replace(1), min_slices=1, parallelism="data=8"),
    Case("an elastic run whose mesh adapts (data) goes on with the slice left",
         preempted(1), shrink((0,), (1,), (1,)), min_slices=1, parallelism="data"),
    Case("an elastic run with a spare loses both slices: the spare takes one's place and the run goes on at once "
         "on the spare alone while the other is made again",
         preempted(0, 1), swap(((0, 2),), shrink((2,), (1,), (1,))), min_slices=1, ready=(2,)),
    Case("a program failure while shrunk: relaunched on the slices left, still without the missing one",
         program((0, 0)), relaunch(on=(0,)), working=(0,), min_slices=1),
    Case("a shrunk run loses the slice it went on with: none left, it waits for the replacement",
         preempted(0), replace(0), working=(0,), min_slices=1),
    # ---- budgets
    Case("the preemption budget is spent (recovery.max_preemptions 1, a second preemption): the run stops",
         preempted(1), Stop("the max_preemptions budget is spent: 2 preemption incident(s), 1 allowed "
                            "(recovery.max_preemptions)"),
         earlier=(preempted(0),), budgets={"max_preemptions": 1}, ready=(2,)),
    Case("the failure budget is spent (recovery.max_failures 1, a second program failure): the run stops",
         program(), Stop("the max_failures budget is spent: 2 program-failure and infrastructure incident(s), "
                         "1 allowed (recovery.max_failures)"),
         earlier=(program(),), budgets={"max_failures": 1}),
    Case("an infrastructure failure pays from the same budget as a program's: spent, the run stops",
         infrastructure(1), Stop("the max_failures budget is spent: 2 program-failure and infrastructure "
                                 "incident(s), 1 allowed (recovery.max_failures)"),
         earlier=(program(),), budgets={"max_failures": 1}),
    Case("the hang budget is spent (recovery.max_hangs 0): the run stops",
         HANG, Stop("the max_hangs budget is spent: 1 hang incident(s), 0 allowed (recovery.max_hangs)"),
         budgets={"max_hangs": 0}),
    Case("the recovery deadline has passed (recovery.deadline_s 30, a failure 60 s in): the run stops",
         preempted(1), Stop("the recovery deadline of 30s has passed (recovery.deadline_s)"),
         budgets={"deadline_s": 30}, ready=(2,)),
    Case("a preemption with budget left never waits: replaced at once, though earlier failures backed off",
         preempted(1), replace(1), earlier=(program(), program())),
    Case("a hang with budget left: relaunched on the same slices after the backoff",
         HANG, relaunch()),
    Case("a second program failure with budget left: relaunched after twice the backoff, its slice never replaced",
         program(), relaunch(wait=2 * BACKOFF_S), earlier=(program(),)),
    Case("an attempt that ended without a clear cause (infrastructure, no slice named): relaunched after the backoff",
         Incident(Cause.INFRASTRUCTURE, frozenset(), "the attempt ended without a clear cause"), relaunch()),
    Case("a host failing the same host-level way twice in a row: its slice is quarantined and replaced",
         infrastructure(host=(1, 0)), replace(1, cause=Cause.INFRASTRUCTURE, wait=2 * BACKOFF_S),
         earlier=(infrastructure(host=(1, 0)),)),
    # ---- notices, as classify reads them
    Case("a preemption notice for slice 1, every program stopped at its checkpoint (exit 75): slice 1 replaced "
         "at once",
         seen((EXIT_PREEMPTED, EXIT_PREEMPTED), notices=frozenset({1})), replace(1)),
    Case("a preemption notice for slice 1 and a ready spare: the spare takes its place before the VM goes",
         seen((EXIT_PREEMPTED, EXIT_PREEMPTED), notices=frozenset({1})), swap(((1, 2),), relaunch(wait=0.0)),
         ready=(2,)),
    Case("a program that exited 75 on slice 0 though the watch saw no notice: slice 0 replaced",
         seen((EXIT_PREEMPTED, 0)), replace(0)),
    Case("a program failure on slice 1 and its peer aborted by JAX (exit 134): relaunch, nothing replaced",
         seen((134, 3)), relaunch()),
]


def plan(case: Case) -> Plan:
    spec = parse_spec({"name": "c", "backend": "simulated", "slices": list(case.groups)})
    policy = RecoveryPolicy.from_spec(RecoverySpec(**{"backoff_s": BACKOFF_S, **case.budgets}))
    history = RecoveryState(started=1000.0, now=1000.0 + case.elapsed_s, incidents=[*case.earlier, case.incident])
    run = RunSlices(case.slices, case.working or case.slices, case.min_slices, case.parallelism)
    return plan_recovery(Failure(0, case.incident), policy=policy, history=history, run=run, spec=spec,
                         ready_spares=case.ready, swapped=case.swapped)


def without_why(decision: Plan) -> Plan:
    if isinstance(decision, Stop):
        return decision
    if isinstance(decision, Swap):
        return dataclasses.replace(decision, then=without_why(decision.then), why="")
    return dataclasses.replace(decision, why="")


@pytest.mark.parametrize("case", CASES, ids=[c.words for c in CASES])
def test_the_plan_after_a_failure(case: Case) -> None:
    assert without_why(plan(case)) == case.expected


@pytest.mark.parametrize("case", CASES, ids=[c.words for c in CASES])
def test_every_decision_says_why(case: Case) -> None:
    decision = plan(case)
    steps = [decision, decision.then] if isinstance(decision, Swap) else [decision]
    for step in steps:
        assert step.why.strip()
        if not isinstance(step, (Stop, Swap)):
            assert step.why.startswith(case.incident.cause.value)  # the cause it answers


def test_the_plan_imports_nothing_that_does_io() -> None:
    """No Ray, no store, no cloud, no clock: what it weighs comes in as arguments."""
    import ast

    from podmanager.supervision import recovery_plan

    tree = ast.parse(Path(recovery_plan.__file__).read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)} | \
        {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    allowed = {"__future__", "collections.abc", "dataclasses", "podmanager.core", "podmanager.core.errors",
               "podmanager.core.spec", "podmanager.core.workload", "podmanager.supervision.classify",
               "podmanager.supervision.policy"}
    assert imported <= allowed, imported - allowed


def test_a_slice_an_edited_spec_took_stops_the_run_and_says_so() -> None:
    stop = stop_for_dropped([2])
    assert stop is not None and "slice(s) [2] of the run are no longer in the cluster's spec" in stop.reason
    assert stop_for_dropped([]) is None
