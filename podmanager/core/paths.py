"""Where podmanager keeps its files: `$PODMANAGER_HOME`, default `~/.podmanager`."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    # Absolute: the supervisors and hosts that read it run in other folders.
    path = Path(os.environ.get("PODMANAGER_HOME") or Path.home() / ".podmanager").expanduser().absolute()
    path.mkdir(parents=True, exist_ok=True)
    return path


def cluster_dir(cluster: str) -> Path:
    """Per-cluster files: the Ray token, the head's and simulated hosts' pids, run logs."""
    path = home() / "clusters" / cluster
    path.mkdir(parents=True, exist_ok=True)
    return path


def sim_state_path(project: str) -> Path:
    return home() / "sim" / f"{project}.json"
