"""Classification and the recovery policy: pure, no cluster needed."""

import pytest

from podmanager.cloud.base import NodeState
from podmanager.core.spec import RecoverySpec
from podmanager.supervision.classify import (
    Cause,
    CleanExit,
    HostOutcome,
    Incident,
    Observation,
    classify,
    finished,
)
from podmanager.supervision.policy import (
    RecoveryPolicy,
    RecoveryState,
    budget,
    deadline,
    quarantined,
)

READY = {0: NodeState.READY, 1: NodeState.READY}


def hosts(*codes, lost=None, dead=()):
    return tuple(HostOutcome(i, 0, code, lost if i == 0 else None, i in dead) for i, code in enumerate(codes))


def test_cloud_preemption_wins_over_the_exit_codes_it_caused():
    seen = Observation(hosts(134, None, lost="ActorDiedError"), {0: NodeState.PREEMPTED, 1: NodeState.READY})
    incident = classify(seen)
    assert incident.cause is Cause.PREEMPTION and incident.slices == {0}


def test_vanished_slice_and_dead_node_are_preemptions():
    assert classify(Observation(hosts(None, 0), {0: None, 1: NodeState.READY})).slices == {0}
    assert classify(Observation(hosts(None, -9, dead=(1,)), READY)).slices == {1}
    assert classify(Observation(hosts(0, 0), {0: NodeState.TERMINATED, 1: NodeState.READY})).cause is Cause.PREEMPTION


def test_notice_exit_is_a_preemption_of_that_slice():
    incident = classify(Observation(hosts(75, 75), READY, notices=frozenset({1})))
    assert incident.cause is Cause.PREEMPTION and incident.slices == {1}  # slice 0 stopped with it, unnoticed
    unseen = classify(Observation(hosts(75, 0), READY))  # the program saw a notice the watch did not
    assert unseen.cause is Cause.PREEMPTION and unseen.slices == {0}


def test_program_failure_names_the_failing_host_not_the_aborted_peer():
    incident = classify(Observation(hosts(134, 1), READY))
    assert incident.cause is Cause.PROGRAM and incident.host == (1, 0) and incident.slices == frozenset()
    assert "exited with code 1" in incident.detail


def test_hang_and_infrastructure():
    assert classify(Observation(hosts(-15, -15), READY, hung=True)).cause is Cause.HANG
    infra = classify(Observation(hosts(None, None), READY, host_problems={(1, 0): "chips held by pid 7"}))
    assert infra.cause is Cause.INFRASTRUCTURE and infra.slices == {1} and infra.detail == "chips held by pid 7"
    unreachable = classify(Observation(hosts(None, None, lost="ActorUnavailableError"), READY))
    assert unreachable.cause is Cause.INFRASTRUCTURE and unreachable.slices == {0}


# Every process exited 0: (asked to stop for a notice, said done, step reached, step count declared)
# -> the run is finished (else it stopped for the notice and resumes on the replacement).
@pytest.mark.parametrize("asked, done, step, total, ends_the_run", [
    (False, False, None, None, True),  # no notice: an exit 0 is the end, whatever it reported
    (False, False, 14, 10_000, True),  # ... even short of a declared count (the program chose to end)
    (True, False, 14, None, False),  # the case: checkpointed on SIGTERM and exited 0 at step 14
    (True, False, None, None, False),  # a plain command that reports no step, stopped by the notice
    (True, False, 14, 10_000, False),  # declared 10,000 steps and made 14
    (True, False, 9_999, 10_000, False),
    (True, False, 10_000, 10_000, True),  # reached its declared count as the notice came
    (True, False, 10_001, 10_000, True),
    (True, False, None, 10_000, False),  # declared a count, no step reached yet
    (True, True, 14, None, True),  # said it was done
    (True, True, 14, 10_000, True),  # its word wins over the count
])
def test_an_exit_0_after_a_notice_is_a_stop_for_it_unless_the_program_said_it_was_done(
        asked, done, step, total, ends_the_run):
    assert finished(CleanExit(asked_to_stop=asked, said_done=done, step=step, total_steps=total)) is ends_the_run


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
