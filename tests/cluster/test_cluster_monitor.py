"""The cluster's monitor (`cluster/cluster_monitor.py`): started next to the head with the
cluster's name alone, no callable through Ray; each round it opens the named cluster in its
own process for the cloud's view and the hot spares, one job's failure not skipping the other."""

from __future__ import annotations

import pytest

from podmanager.cluster.cloud_view import CloudWatcher
from podmanager.cluster.cluster_access import ClusterAccess
from podmanager.cluster.cluster_monitor import ClusterMonitor, MonitorRounds
from podmanager.cluster.spare_keeper import SpareKeeper
from podmanager.controller import head_actors, monitor


def test_the_cluster_monitor_is_started_with_the_clusters_name_alone(monkeypatch) -> None:
    started = []
    monkeypatch.setattr(head_actors, "find", lambda name: None)
    monkeypatch.setattr(head_actors, "start", lambda actor_class, name, *args, **options: started.append(
        (actor_class, name, args, options)))

    monitor.ensure_monitor("c", ClusterMonitor)

    assert started == [(ClusterMonitor, "pm-c-monitor", ("c",), {})]


def test_a_running_monitor_is_not_started_again(monkeypatch) -> None:
    started = []
    monkeypatch.setattr(head_actors, "find", lambda name: object())
    monkeypatch.setattr(head_actors, "start", lambda *args, **options: started.append(args))

    monitor.ensure_monitor("c", ClusterMonitor)

    assert started == []


def test_each_round_opens_the_named_cluster_for_the_cloud_view_and_the_spares(podmanager_home, monkeypatch) -> None:
    opened = []

    def open_cluster(name: str) -> ClusterAccess:
        opened.append(name)
        raise RuntimeError(f"no cluster {name}")  # as a torn-down cluster's would

    monkeypatch.setattr(ClusterAccess, "from_name", open_cluster)
    # No head is recorded in this home: the probe loop ends at once, and the round is run here.
    watching = ClusterMonitor(str(podmanager_home), "c")
    watching._thread.join(timeout=10)
    assert not watching._thread.is_alive()
    rounds = watching._also
    assert isinstance(rounds, MonitorRounds)
    assert [type(job) for job in rounds.jobs] == [CloudWatcher, SpareKeeper]

    with pytest.raises(RuntimeError, match="no cluster c"):
        rounds()

    assert opened == ["c", "c"]  # the spare keeper had its turn after the watcher failed

