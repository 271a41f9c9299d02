"""A service's requests over time (state/service_history.py): each second for the last hour,
then rolled into minutes and hours, the counts kept whole and the series bounded."""

from __future__ import annotations

import pytest

from podmanager.state.service_history import MAX_POINTS, TIERS, Point, ServiceHistory

T0 = 1_800_000_000.0  # a whole hour


def second(at: float, requests: int = 10, failed: int = 0, p50: float | None = 5.0, p99: float | None = 9.0,
           replicas: int = 2) -> Point:
    return Point(start=at, width_s=1.0, requests=requests, failed=failed, p50_ms=p50, p99_ms=p99, replicas=replicas)


def test_two_rows_for_one_second_add_up():
    history = ServiceHistory()
    history.add("c", "s", second(T0, requests=3, failed=1, p99=8.0, replicas=2))
    history.add("c", "s", second(T0, requests=4, failed=0, p99=12.0, replicas=1))
    history.add("c", "s", second(T0, requests=1, p50=None, p99=None))
    assert history.series("s") == [Point(T0, 1.0, 8, 1, 5.0, 12.0, 1)]


def test_seconds_older_than_an_hour_become_minutes_that_keep_every_request():
    history = ServiceHistory()
    for i in range(2 * 3600):  # two hours of seconds, compacted once a minute as the router does
        history.add("c", "s", second(T0 + i, requests=1 + i % 3, failed=1 if i == 30 else 0,
                                     p50=float(i % 60), p99=100.0 if i == 45 else 10.0, replicas=1 if i == 50 else 2))
        if i % 60 == 59:
            history.compact("s", T0 + i + 1)
    rows = history.series("s")
    minutes = [p for p in rows if p.width_s == 60.0]
    seconds = [p for p in rows if p.width_s == 1.0]
    assert sum(p.requests for p in rows) == sum(1 + i % 3 for i in range(2 * 3600))  # none lost, none twice
    assert len(seconds) <= 3600 + 60 and seconds[-1].start == T0 + 2 * 3600 - 1
    assert minutes and minutes[-1].start + 60 <= seconds[0].start  # no time in both
    first = minutes[0]
    assert (first.start, first.requests, first.failed) == (T0, 120, 1)
    assert first.p50_ms == pytest.approx(29.5) and first.p99_ms == 100.0 and first.replicas == 1
    assert [p.start for p in rows] == sorted(p.start for p in rows)


def test_minutes_older_than_a_day_become_hours_and_hours_older_than_30_days_go():
    history = ServiceHistory()
    old = T0 - 31 * 86400
    history.add("c", "s", Point(old, 3600.0, 5, 0, 1.0, 2.0, 1))  # past every tier
    for m in range(120):  # two hours of minutes, a day and more ago
        history.add("c", "s", Point(T0 - 86400 - 7200 + 60 * m, 60.0, 60, 1, 3.0, 7.0, 2))
    history.compact("s", T0)
    rows = history.series("s")
    assert [(p.width_s, p.start, p.requests, p.failed) for p in rows] == [
        (3600.0, T0 - 86400 - 7200, 3600, 60), (3600.0, T0 - 86400 - 3600, 3600, 60)]


def test_the_series_is_bounded():
    assert MAX_POINTS == (3600 + 60) + (1440 + 60) + 720 + 1
    assert TIERS[0] == (1.0, 3600.0)
