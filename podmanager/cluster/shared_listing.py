"""One `ListNodes` per zone per health slot for a whole cluster, however many runs watch it.

Every run's supervisor checks its slices' zones once per `health.interval_s`, and the
supervisors of one cluster are separate processes. Their checks fall in the same slots of
time (`slot = floor(now / interval_s)`, the same clock for all), so the first to look in a
slot lists the zone and leaves the answer in the cluster's folder; the others read it. Each
supervisor still sees, once per slot, a listing taken in that slot: detection is as fast as
with a listing of its own, and the API's read quota pays for one run, not for every run.
"""

from __future__ import annotations

import fcntl
import json
from pathlib import Path

from pydantic import TypeAdapter

from podmanager.cloud.base import Node, TpuCloud
from podmanager.core.files import write_atomic

_NODES = TypeAdapter(list[Node])


class SharedZoneListing:
    """`list_nodes(zone, slot)`: the zone's nodes as listed in that slot, listed at most once
    per slot by all the processes that share `folder`."""

    def __init__(self, cloud: TpuCloud, folder: Path):
        self.cloud = cloud
        self.folder = folder

    def list_nodes(self, zone: str, slot: int) -> list[Node]:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{zone}.json"
        # Held while listing, so a second supervisor in the same slot waits for the answer
        # instead of asking the API too.
        with open(self.folder / f"{zone}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                kept = self._read(path)
                if kept is not None and kept[0] == slot:
                    return kept[1]
                nodes = self.cloud.list_nodes(zone)
                write_atomic(path, json.dumps({"slot": slot, "nodes": _NODES.dump_python(nodes, mode="json")}))
                return nodes
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    @staticmethod
    def _read(path: Path) -> tuple[int, list[Node]] | None:
        """(slot, nodes) from the file, or None when it is missing or unreadable (then listed afresh)."""
        try:
            data = json.loads(path.read_text())
            return int(data["slot"]), _NODES.validate_python(data["nodes"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
