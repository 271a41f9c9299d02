"""The cluster's host monitor: a detached Ray actor on the head node that probes every
host about once a second and keeps `cluster_dir/hosts.json` (snapshot.py) up to date.

It exists so that `status` can show the hosts without connecting to Ray itself. It only
observes: health checks during a run and the launch of a run still probe the hosts live.
Each round it also runs `also`, given by a subclass in its own process: the cluster's
monitor (`cluster/cluster_monitor.py`) keeps the cloud's view of the slices and the hot
spares this way.
It runs where the client's state folder is, so it is started only for a head podmanager
started on this machine (for a head the spec names, `status` probes the hosts live).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Callable

from podmanager.controller import fleet, head, head_actors, snapshot
from podmanager.vm import procs

log = logging.getLogger(__name__)

PERIOD_S = 1.0
PROBE_TIMEOUT_S = 1.0


def monitor_name(cluster: str) -> str:
    return f"pm-{cluster}-monitor"


class HostMonitor:
    """Plain class; `ensure_monitor` starts it (or a subclass) as one of the head's actors."""

    def __init__(self, home: str, cluster: str, also: Callable[[], None] | None = None) -> None:
        head_actors.enter_home(home)  # the snapshot goes to the client's state folder
        self.cluster = cluster
        self._also = also
        self._head_record = Path(home) / "clusters" / cluster / head.HEAD_FILE
        self._thread = threading.Thread(target=self._watch, name=f"monitor-{cluster}", daemon=True)
        self._thread.start()

    def _folder_is_ours(self) -> bool:
        """The state folder still records this monitor's head. Once it is deleted, or records
        another head (a new `up` after the folder was lost), writing there would re-create a
        deleted folder or mix another cluster's hosts into its snapshot."""
        record = procs.read_record(self._head_record)
        ours = os.environ.get(procs.MACHINE_ENV)  # the head's, inherited from its raylet
        return record is not None and (ours is None or record.get("machine_id") == ours)

    def _watch(self) -> None:
        while self._folder_is_ours():  # until the actor is killed (down), its node stops or its folder goes
            started = time.time()
            try:
                snapshot.write(self.cluster, fleet.probe_hosts(self.cluster, timeout_s=PROBE_TIMEOUT_S), started)
            except Exception:  # noqa: BLE001 - one failed round must not end the monitoring
                log.exception("probing the hosts of %s failed", self.cluster)
            if self._also is not None:
                try:
                    self._also()
                except Exception:  # noqa: BLE001 - nor a failed look at the cloud (status then asks it)
                    log.exception("watching the cloud for %s failed", self.cluster)
            time.sleep(max(0.0, PERIOD_S - (time.time() - started)))


def ensure_monitor(cluster: str, monitor_class: type[HostMonitor] = HostMonitor) -> None:
    """Start the cluster's monitor, a `monitor_class` built from (home, cluster) alone, unless
    it runs (the caller is connected to the cluster's Ray)."""
    if head_actors.find(monitor_name(cluster)) is not None:
        return
    try:  # a crashed monitor comes back (Ray restarts it); meanwhile status probes live
        head_actors.start(monitor_class, monitor_name(cluster), cluster)
    except ValueError:  # another process started it a moment ago
        pass

