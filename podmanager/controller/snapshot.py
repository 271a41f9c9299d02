"""The hosts of a cluster as its monitor last probed them: `cluster_dir/hosts.json`.

The monitor (monitor.py, a Ray actor next to the head) rewrites the file about once a
second; `status` reads it instead of connecting to Ray, which would cost more than the
rest of the command. A snapshot older than `MAX_AGE_S` (no monitor, a stopped head) is
not used: the caller probes the hosts itself.
"""

from __future__ import annotations

import time
from pathlib import Path

from pydantic import BaseModel, ValidationError

from podmanager.controller.host_info import HostInfo
from podmanager.core import paths
from podmanager.core.files import write_atomic

SNAPSHOT_FILE = "hosts.json"
MAX_AGE_S = 5.0  # a few monitor periods: a slow probe round must not send status to Ray


class HostsSnapshot(BaseModel):
    """What the file holds."""

    observed_at: float  # unix time of the probe round
    hosts: list[HostInfo]


def path(cluster: str) -> Path:
    return paths.cluster_dir(cluster) / SNAPSHOT_FILE


def write(cluster: str, hosts: list[HostInfo], observed_at: float) -> None:
    path(cluster).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path(cluster), HostsSnapshot(observed_at=observed_at, hosts=hosts).model_dump_json())


def read_fresh(cluster: str, max_age_s: float = MAX_AGE_S, now: float | None = None) -> tuple[float, list[HostInfo]] | None:
    """(when it was observed, the hosts) if the snapshot is at most `max_age_s` old, else None."""
    try:
        snapshot = HostsSnapshot.model_validate_json(path(cluster).read_bytes())
    except (FileNotFoundError, ValidationError):  # none, or written by another version: probe instead
        return None
    now = time.time() if now is None else now
    if not 0.0 <= now - snapshot.observed_at <= max_age_s:
        return None
    return snapshot.observed_at, snapshot.hosts


def remove(cluster: str) -> None:
    path(cluster).unlink(missing_ok=True)
