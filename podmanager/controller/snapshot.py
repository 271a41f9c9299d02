"""The hosts of a cluster as its monitor last probed them: `cluster_dir/hosts.json`.

The monitor (monitor.py, a Ray actor next to the head) rewrites the file about once a
second; `status` reads it instead of connecting to Ray, which would cost more than the
rest of the command. A snapshot older than `MAX_AGE_S` (no monitor, a stopped head) is
not used: the caller probes the hosts itself.
"""

from __future__ import annotations

import time
from dataclasses import asdict, fields
from pathlib import Path

from podmanager.controller.host_info import HostInfo
from podmanager.core import paths
from podmanager.vm import procs

SNAPSHOT_FILE = "hosts.json"
MAX_AGE_S = 5.0  # a few monitor periods: a slow probe round must not send status to Ray


def path(cluster: str) -> Path:
    return paths.cluster_dir(cluster) / SNAPSHOT_FILE


def write(cluster: str, hosts: list[HostInfo], observed_at: float) -> None:
    procs.write_record(path(cluster), observed_at=observed_at, hosts=[asdict(h) for h in hosts])


def read_fresh(cluster: str, max_age_s: float = MAX_AGE_S, now: float | None = None) -> tuple[float, list[HostInfo]] | None:
    """(when it was observed, the hosts) if the snapshot is at most `max_age_s` old, else None."""
    record = procs.read_record(path(cluster))
    if not record:
        return None
    now = time.time() if now is None else now
    try:
        observed_at = float(record["observed_at"])
        known = {f.name for f in fields(HostInfo)}
        hosts = [HostInfo(**{k: v for k, v in h.items() if k in known}) for h in record["hosts"]]
    except (KeyError, TypeError, ValueError):  # written by another version: probe instead
        return None
    if not 0.0 <= now - observed_at <= max_age_s:
        return None
    return observed_at, hosts


def remove(cluster: str) -> None:
    path(cluster).unlink(missing_ok=True)
