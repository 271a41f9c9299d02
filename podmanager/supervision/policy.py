"""When to try again: small composable stop conditions, a backoff, one state object.

In the spirit of tenacity: each condition is a tiny callable taking the `RecoveryState`
and returning the reason to stop (or None); `|` combines them, and the first reason wins.
Preemptions, program failures and hangs have budgets of their own, so a long spot run
survives a hundred preemptions but not a third crash of the program.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from podmanager.core.spec import RecoverySpec
from podmanager.supervision.classify import Cause, Incident


@dataclass
class RecoveryState:
    started: float
    now: float = 0.0
    incidents: list[Incident] = field(default_factory=list)

    @property
    def counts(self) -> Counter[Cause]:
        return Counter(i.cause for i in self.incidents)

    def consecutive(self, incident: Incident) -> int:
        """How many incidents in a row, ending with the last, were this same failure."""
        run = 0
        for past in reversed(self.incidents):
            if (past.cause, past.host, past.slices) != (incident.cause, incident.host, incident.slices):
                break
            run += 1
        return run


class StopCondition:
    def __init__(self, check: Callable[[RecoveryState], str | None]):
        self.check = check

    def __call__(self, state: RecoveryState) -> str | None:
        return self.check(state)

    def __or__(self, other: "StopCondition") -> "StopCondition":
        return StopCondition(lambda state: self(state) or other(state))


_BUDGET_NAMES = {
    Cause.PREEMPTION: "max_preemptions",
    Cause.PROGRAM: "max_failures",
    Cause.HANG: "max_hangs",
    Cause.INFRASTRUCTURE: "max_failures",
}


def budget(causes: tuple[Cause, ...], limit: int) -> StopCondition:
    """Stop once more than `limit` incidents of these causes happened."""
    name = _BUDGET_NAMES[causes[0]]

    def check(state: RecoveryState) -> str | None:
        used = sum(state.counts[c] for c in causes)
        if used > limit:
            kinds = " and ".join(c.value for c in causes)
            return f"the {name} budget is spent: {used} {kinds} incident(s), {limit} allowed (recovery.{name})"
        return None

    return StopCondition(check)


def deadline(seconds: float) -> StopCondition:
    def check(state: RecoveryState) -> str | None:
        if state.now - state.started > seconds:
            return f"the recovery deadline of {seconds:.0f}s has passed (recovery.deadline_s)"
        return None

    return StopCondition(check)


def never() -> StopCondition:
    return StopCondition(lambda state: None)


@dataclass(frozen=True)
class Decision:
    retry: bool
    wait_s: float = 0.0
    reason: str | None = None


@dataclass
class RecoveryPolicy:
    stop: StopCondition
    backoff_s: float = 1.0
    max_backoff_s: float = 60.0

    @classmethod
    def from_spec(cls, spec: RecoverySpec) -> "RecoveryPolicy":
        stop = (budget((Cause.PREEMPTION,), spec.max_preemptions)
                | budget((Cause.PROGRAM, Cause.INFRASTRUCTURE), spec.max_failures)
                | budget((Cause.HANG,), spec.max_hangs))
        if spec.deadline_s is not None:
            stop = stop | deadline(spec.deadline_s)
        return cls(stop=stop, backoff_s=spec.backoff_s)

    def decide(self, state: RecoveryState) -> Decision:
        reason = self.stop(state)
        if reason is not None:
            return Decision(False, reason=reason)
        last = state.incidents[-1]
        # Preemptions are the cloud's doing: no reason to wait. Failures back off exponentially.
        if last.cause is Cause.PREEMPTION:
            return Decision(True, 0.0)
        repeats = state.counts[last.cause]
        return Decision(True, min(self.max_backoff_s, self.backoff_s * 2 ** (repeats - 1)))


def quarantined(state: RecoveryState) -> frozenset[int]:
    """Slices whose host failed the same host-level way twice in a row: replace them, don't
    reuse them. A program failure never replaces a slice: the hosts are healthy, and on
    Google Cloud a new TPU would not fix a bug."""
    last = state.incidents[-1] if state.incidents else None
    if last is None or last.host is None or last.cause is not Cause.INFRASTRUCTURE or state.consecutive(last) < 2:
        return frozenset()
    return frozenset({last.host[0]})


def slices_left(working: list[int], lost: list[int], min_slices: int | None,
                fits: Callable[[list[int]], bool] = lambda slices: True) -> list[int] | None:
    """Elastic runs: the slices the next attempt goes on with at once when `lost` are gone and
    no spare took their place: those of `working` left, if there are at least `min_slices` and
    the program's mesh `fits` them. None: wait for the replacement (no `--min-slices`, too few
    left, nothing lost, or a mesh of fixed size)."""
    left = sorted(set(working) - set(lost))
    if min_slices is None or not lost or len(left) == len(working) or len(left) < min_slices or not fits(left):
        return None
    return left
