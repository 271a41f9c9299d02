"""The cluster's host monitor: a detached Ray actor on the head node that probes every
host about once a second and keeps `cluster_dir/hosts.json` (snapshot.py) up to date.

It exists so that `status` can show the hosts without connecting to Ray itself. It only
observes: health checks during a run and the launch of a run still probe the hosts live.
Each round it also runs `also` (the caller's: the operations layer keeps the cloud's view of
the slices this way, `cluster/cloud_view.py`).
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

import ray

from podmanager.controller import fleet, head, snapshot
from podmanager.core import paths
from podmanager.vm import procs

log = logging.getLogger(__name__)

PERIOD_S = 1.0
PROBE_TIMEOUT_S = 1.0


def monitor_name(cluster: str) -> str:
    return f"pm-{cluster}-monitor"


class HostMonitor:
    """Plain class; `ensure_monitor` wraps it with `ray.remote` and its options."""

    def __init__(self, home: str, cluster: str, also: Callable[[], None] | None = None) -> None:
        os.environ["PODMANAGER_HOME"] = home  # the snapshot goes to the client's state folder
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


def ensure_monitor(cluster: str, also: Callable[[], None] | None = None) -> None:
    """Start the cluster's monitor unless it runs (the caller is connected to the cluster's Ray);
    `also` runs in the monitor once a round."""
    try:
        ray.get_actor(monitor_name(cluster), namespace=fleet.NAMESPACE)
        return
    except ValueError:
        pass
    try:
        ray.remote(HostMonitor).options(
            name=monitor_name(cluster),
            namespace=fleet.NAMESPACE,
            lifetime="detached",
            max_restarts=-1,  # a crashed monitor comes back; meanwhile status probes live
            num_cpus=0,
            resources={fleet.HEAD_RESOURCE: 0.001},
        ).remote(str(paths.home()), cluster, also)
    except ValueError:  # another process started it a moment ago
        pass

