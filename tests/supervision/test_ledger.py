"""The run's goodput, with exact figures: the steps that count (each final step once), at each
attempt's own pace, over the run's wall time."""

import pytest

from podmanager.core.run_results import AttemptResult
from podmanager.supervision.ledger import goodput


def attempt(number, first_step=None, last_step=None, first_time=None, last_time=None) -> AttemptResult:
    return AttemptResult(attempt=number, status="failed", started=0.0, ended=0.0, hosts=[], first_step=first_step,
                         last_step=last_step, first_step_time=first_time, last_step_time=last_time)


def test_one_attempt_is_its_steps_at_its_pace_over_the_wall_time():
    # Steps 1..101 over 50 s: 0.5 s a step, 101 steps = 50.5 s productive out of 100 s.
    assert goodput([attempt(0, 1, 101, 10.0, 60.0)], wall_s=100.0) == pytest.approx(0.505)


def test_steps_redone_after_a_restore_count_once():
    # Attempt 0 reached step 60 (1 s a step); attempt 1 restored from step 40 and went on to 100
    # (0.5 s a step). Steps 1..40 count from attempt 0 (40 s), 41..100 from attempt 1 (30 s).
    attempts = [attempt(0, 1, 60, 0.0, 59.0), attempt(1, 41, 100, 100.0, 129.5)]
    assert goodput(attempts, wall_s=140.0) == pytest.approx(70.0 / 140.0)


def test_an_attempt_with_no_progress_adds_nothing():
    attempts = [attempt(0, 1, 11, 0.0, 10.0), attempt(1), attempt(2, 12, 21, 50.0, 59.0)]
    assert goodput(attempts, wall_s=100.0) == pytest.approx(21.0 / 100.0)


def test_no_wall_time_has_no_goodput_and_it_never_exceeds_one():
    assert goodput([attempt(0, 1, 11, 0.0, 10.0)], wall_s=0.0) is None
    assert goodput([attempt(0, 1, 11, 0.0, 10.0)], wall_s=5.0) == 1.0


def test_a_run_that_reported_no_progress_has_no_goodput_rather_than_zero():
    assert goodput([attempt(0), attempt(1)], wall_s=30.0) is None
