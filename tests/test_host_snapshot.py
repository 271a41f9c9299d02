"""The monitor's snapshot of a cluster's hosts (controller/snapshot.py), read without Ray."""

from __future__ import annotations

import json

from podmanager.controller import snapshot
from podmanager.controller.host_info import DEAD, HEALTHY, HostInfo, mark_vanished

HOSTS = [
    HostInfo(0, "demo-s0", 0, "127.0.0.1", 4, True, 100.0, "n0", "ok", HEALTHY),
    HostInfo(0, "demo-s0", 1, "127.0.0.1", 4, True, 100.0, "n1", "ok", HEALTHY),
]


def test_a_fresh_snapshot_reads_back_as_written(podmanager_home):
    snapshot.write("demo", HOSTS, observed_at=100.0)
    assert snapshot.read_fresh("demo", max_age_s=5.0, now=104.0) == (100.0, HOSTS)


def test_an_old_or_future_snapshot_is_not_used(podmanager_home):
    snapshot.write("demo", HOSTS, observed_at=100.0)
    assert snapshot.read_fresh("demo", max_age_s=5.0, now=105.5) is None
    assert snapshot.read_fresh("demo", max_age_s=5.0, now=99.0) is None  # clock went back: do not trust it


def test_a_missing_removed_or_foreign_snapshot_is_not_used(podmanager_home):
    assert snapshot.read_fresh("demo", now=100.0) is None
    snapshot.write("demo", HOSTS, observed_at=100.0)
    snapshot.remove("demo")
    assert snapshot.read_fresh("demo", now=100.0) is None
    snapshot.path("demo").write_text(json.dumps({"observed_at": 100.0, "hosts": [{"slice": 0}]}))
    assert snapshot.read_fresh("demo", now=100.0) is None
    snapshot.path("demo").write_text("{not json")
    assert snapshot.read_fresh("demo", now=100.0) is None


def test_a_host_whose_machine_vanished_is_dead_whatever_the_snapshot_says():
    marked = mark_vanished(HOSTS, {("demo-s0", 1)})
    assert marked[0] == HOSTS[0]
    assert (marked[1].state, marked[1].healthy) == (DEAD, False)
    assert marked[1].detail.startswith("simulated VM is gone")
