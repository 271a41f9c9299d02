"""The Python API: `Cluster` and its verbs. The CLI is a thin skin over this package."""

from podmanager.api.cluster import (
    Cluster,
    ClusterStatus,
    DownReport,
    SliceStatus,
    down,
    resolve_cluster,
)
from podmanager.api.runs import RunHandle, run_log_lines, run_summary
from podmanager.api.teardown import LabelDownReport, down_by_label, teardown
from podmanager.state import StateStore

__all__ = ["Cluster", "ClusterStatus", "DownReport", "LabelDownReport", "RunHandle", "SliceStatus", "StateStore",
           "down", "down_by_label", "resolve_cluster", "run_log_lines", "run_summary", "teardown"]
