"""The Python API: `Cluster` and its verbs. The CLI is a thin skin over this package.

Names load on first use (PEP 562), so `podmanager --help` and the CLI's argument errors
do not wait for Ray and JAX to import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from podmanager.api.cluster import Cluster, resolve_cluster
    from podmanager.api.cluster_down import DownReport, down
    from podmanager.api.dashboard import open_page
    from podmanager.api.history import cluster_events, run_history, service_history
    from podmanager.api.run_handle import (
        RunHandle,
        latest_run_id,
        run_log_lines,
        run_summary,
    )
    from podmanager.api.service_handle import ServiceHandle
    from podmanager.api.timeline import run_timeline, write_timeline_html
    from podmanager.api.up_plan import UpPlan
    from podmanager.channel.cluster_status import ClusterStatus, SliceStatus
    from podmanager.client.channel_access import (
        ChannelAccess,
        access_add,
        access_callers,
        access_revoke,
    )
    from podmanager.client.cluster_client import ClusterClient
    from podmanager.client.controller_machine import connect
    from podmanager.client.remote import RemoteCluster, forward, ray_token_file
    from podmanager.client.remote_service import RemoteServiceHandle
    from podmanager.client.remote_up_down import open_spec
    from podmanager.cluster.teardown import LabelDownReport, down_by_label, teardown
    from podmanager.core.events import EventKind
    from podmanager.state import StateStore

_WHERE = {
    "Cluster": "podmanager.api.cluster", "ClusterStatus": "podmanager.channel.cluster_status",
    "DownReport": "podmanager.api.cluster_down", "SliceStatus": "podmanager.channel.cluster_status", "UpPlan": "podmanager.api.up_plan",
    "down": "podmanager.api.cluster_down", "resolve_cluster": "podmanager.api.cluster",
    "RunHandle": "podmanager.api.run_handle", "run_log_lines": "podmanager.api.run_handle", "run_summary": "podmanager.api.run_handle",
    "ServiceHandle": "podmanager.api.service_handle",
    "latest_run_id": "podmanager.api.run_handle", "cluster_events": "podmanager.api.history",
    "run_history": "podmanager.api.history", "service_history": "podmanager.api.history",
    "LabelDownReport": "podmanager.cluster.teardown", "down_by_label": "podmanager.cluster.teardown",
    "teardown": "podmanager.cluster.teardown", "open_spec": "podmanager.client.remote_up_down",
    "RemoteCluster": "podmanager.client.remote", "ClusterClient": "podmanager.client.cluster_client", "RemoteServiceHandle": "podmanager.client.remote_service", "connect": "podmanager.client.controller_machine",
    "forward": "podmanager.client.remote", "ray_token_file": "podmanager.client.remote", "StateStore": "podmanager.state", "EventKind": "podmanager.core.events",
    "ChannelAccess": "podmanager.client.channel_callers", "access_add": "podmanager.client.channel_access",
    "access_callers": "podmanager.client.channel_callers", "access_revoke": "podmanager.client.channel_access",
    "open_page": "podmanager.api.dashboard", "run_timeline": "podmanager.api.timeline", "write_timeline_html": "podmanager.api.timeline",
}
__all__ = ["ChannelAccess", "access_add", "access_callers", "access_revoke", "Cluster", "ClusterClient", "ClusterStatus", "DownReport", "EventKind", "LabelDownReport", "RemoteCluster", "RemoteServiceHandle", "RunHandle",
           "ServiceHandle", "SliceStatus", "connect", "forward", "open_page", "open_spec", "ray_token_file",
           "StateStore", "UpPlan", "cluster_events", "down", "down_by_label", "latest_run_id", "resolve_cluster",
           "run_history", "run_log_lines", "run_summary", "run_timeline", "service_history", "teardown",
           "write_timeline_html"]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'podmanager.api' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value
