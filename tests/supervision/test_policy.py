"""supervision/policy.py: the recovery budgets, backoff, deadline and quarantine; pure, no cluster needed."""

from podmanager.core.spec import RecoverySpec
from podmanager.supervision.classify import Cause, Incident
from podmanager.supervision.policy import (
    RecoveryPolicy,
    RecoveryState,
    budget,
    deadline,
    quarantined,
)


def incident(cause, host=None):
    return Incident(cause, frozenset(), "x", host)


def test_budgets_are_separate_and_say_which_is_spent():
    policy = RecoveryPolicy.from_spec(RecoverySpec(max_preemptions=3, max_failures=1, max_hangs=1, backoff_s=1))
    state = RecoveryState(started=0)
    for _ in range(3):
        state.incidents.append(incident(Cause.PREEMPTION))
        assert policy.decide(state).retry
    state.incidents.append(incident(Cause.PROGRAM))
    decision = policy.decide(state)
    assert decision.retry and decision.wait_s == 1
    state.incidents.append(incident(Cause.PROGRAM))
    decision = policy.decide(state)
    assert not decision.retry and "max_failures budget is spent: 2 program-failure" in decision.reason
    state.incidents[-1] = incident(Cause.PREEMPTION)
    assert "max_preemptions" in policy.decide(state).reason


def test_backoff_doubles_for_repeated_failures_and_is_zero_for_preemptions():
    policy = RecoveryPolicy.from_spec(RecoverySpec(max_hangs=10, backoff_s=2))
    state = RecoveryState(started=0, incidents=[incident(Cause.HANG)] * 3)
    assert policy.decide(state).wait_s == 8
    state.incidents.append(incident(Cause.PREEMPTION))
    assert policy.decide(state).wait_s == 0


def test_conditions_compose_and_deadline_counts_from_start():
    stop = budget((Cause.HANG,), 0) | deadline(10)
    state = RecoveryState(started=100, now=105)
    assert stop(state) is None
    state.now = 111
    assert "deadline of 10s" in stop(state)
    state.incidents.append(incident(Cause.HANG))
    assert "max_hangs" in stop(state)


def test_a_host_failing_the_same_way_twice_is_quarantined():
    state = RecoveryState(started=0, incidents=[incident(Cause.INFRASTRUCTURE, (1, 0))])
    assert quarantined(state) == frozenset()
    state.incidents.append(incident(Cause.INFRASTRUCTURE, (1, 0)))
    assert quarantined(state) == {1}
    state.incidents.append(incident(Cause.INFRASTRUCTURE, (0, 0)))
    assert quarantined(state) == frozenset()


def test_a_program_failing_twice_on_the_same_host_never_replaces_its_slice():
    # A typo or a bug fails the same way on healthy hosts: recreating a TPU would not fix it.
    state = RecoveryState(started=0, incidents=[incident(Cause.PROGRAM, (1, 0)), incident(Cause.PROGRAM, (1, 0))])
    assert quarantined(state) == frozenset()
