"""What a failed `up` leaves running, said with the error: the cloud bills READY slices from the
moment they are READY, whether or not their hosts joined, and the Ray head keeps running."""

from __future__ import annotations

import time

from podmanager.cloud.base import NodeState
from podmanager.cluster.cluster_runtime import ClusterRuntime
from podmanager.core.errors import PodmanagerError


def left_running(runtime: ClusterRuntime, now: float | None = None) -> str | None:
    """A sentence naming every node of the cluster that exists (with its state and how long
    it has run) and the head, and the command that deletes them; None when nothing is left."""
    now = time.time() if now is None else now
    try:
        nodes = runtime.observe().nodes
    except PodmanagerError:
        return None  # the cloud cannot be asked: the error itself says why
    parts = []
    for node in sorted(nodes, key=lambda n: n.name):
        age = f" for {_duration(now - node.create_time)}" if node.create_time else ""
        parts.append(f"{node.name} ({node.accelerator_type}, {node.state.value}{age})")
    if runtime.hosts is not None and runtime.hosts.head_problem() is None:
        parts.append("the Ray head")
    if not parts:
        return None
    billing = any(n.state is not NodeState.DELETING for n in nodes)
    return (f"Left running{' and billing' if billing else ''}: "
            f"{', '.join(parts)}. 'podmanager up' again finishes the job; "
            f"'podmanager down -c {runtime.name}' deletes them.")


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
