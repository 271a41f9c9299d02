"""The cluster's monitor: the host monitor's probe loop (`controller/monitor.py`) that also,
once a round, keeps the cloud's view of the slices (`cloud_view.py`) and the hot spares
(`spare_keeper.py`). Both work through a `ClusterAccess` each opens by the cluster's name in
the monitor's own process, so the actor is started with its name alone.
"""

from __future__ import annotations

from typing import Callable

from podmanager.cluster.cloud_view import CloudWatcher
from podmanager.cluster.cluster_access import ClusterAccess
from podmanager.cluster.spare_keeper import SpareKeeper
from podmanager.controller.monitor import HostMonitor


class MonitorRounds:
    """What the cluster's monitor runs each round besides probing the hosts: each job in turn,
    one's failure not keeping the next from its turn."""

    def __init__(self, *jobs: Callable[[], None]):
        self.jobs = jobs

    def __call__(self) -> None:
        failed: Exception | None = None
        for job in self.jobs:
            try:
                job()
            except Exception as error:  # noqa: BLE001 - raised after the others ran (the monitor logs it)
                failed = failed or error
        if failed is not None:
            raise failed


class ClusterMonitor(HostMonitor):
    """Plain class; `ClusterHosts.ensure_monitor(ClusterMonitor)` starts it next to the head."""

    def __init__(self, home: str, cluster: str) -> None:
        super().__init__(home, cluster, also=MonitorRounds(CloudWatcher(cluster, ClusterAccess.from_name),
                                                           SpareKeeper(cluster, ClusterAccess.from_name)))
