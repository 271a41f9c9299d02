"""supervision/classify.py: why an attempt ended, from what its hosts and the cloud said; pure, no cluster needed."""

import pytest

from podmanager.cloud.base import NodeState
from podmanager.supervision.classify import (
    Cause,
    CleanExit,
    HostOutcome,
    Observation,
    classify,
    finished,
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


