"""`poll_until`: the one wait loop, on a manual clock (no wall time)."""

import pytest

from podmanager.core.clock import FakeClock, poll_until
from podmanager.core.errors import SpecError, TimeoutExceededError


def test_returns_the_first_truthy_value_and_sleeps_the_interval_between_calls():
    clock = FakeClock(start=0.0)
    answers = iter([None, 0, [], "ready"])
    assert poll_until(lambda: next(answers), timeout_s=10, interval_s=2, clock=clock) == "ready"
    assert clock.now() == 6.0  # three waits of 2 s


def test_times_out_naming_what_it_waited_for_without_sleeping_past_the_deadline():
    clock = FakeClock(start=0.0)
    calls = []
    with pytest.raises(TimeoutExceededError, match="the slice to be READY did not happen within 5s"):
        poll_until(lambda: calls.append(clock.now()), timeout_s=5, interval_s=2, clock=clock,
                   what="the slice to be READY")
    assert calls == [0.0, 2.0, 4.0, 5.0] and clock.now() == 5.0  # the last look is at the deadline


def test_the_caller_can_say_what_a_timeout_means():
    clock = FakeClock(start=0.0)
    with pytest.raises(SpecError, match="no hosts"):
        poll_until(lambda: None, timeout_s=1, interval_s=1, clock=clock, on_timeout=lambda: SpecError("no hosts"))


def test_a_true_condition_returns_at_once_even_with_no_time_left():
    clock = FakeClock(start=0.0)
    assert poll_until(lambda: 42, timeout_s=0, interval_s=1, clock=clock) == 42
    assert clock.now() == 0.0
