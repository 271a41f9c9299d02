"""Two lanes for the suite under pytest-xdist (`-n 2`, set in pyproject.toml): every test file
that needs Ray runs on one worker, file after file, as in a one-process run (two Ray clusters
at once on 2 cores miss their deadlines); the other files run meanwhile on the other worker,
one file at a time, in what CPU the Ray lane leaves. The Ray worker takes files of the other
lane once its own is done.

A file needs Ray when it marks any test `ray` (`pytest.mark.ray`, read from the collected
items' markers); the whole file goes to the Ray lane, so its module fixtures are set up once.
Files that start JAX processes or a simulated VM but no Ray (`pytest.mark.processes`) run in
the other lane: their processes have no deadline that a slower CPU share misses.

The controller schedules by node id only, so the workers, which collect, write the Ray files
to a file in a folder the controller made (`LANE_FILE_KEY` in each worker's input) before
they report their collection; the controller reads it when it splits the work, and removes
the folder at the session's end.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from functools import cache
from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling

RAY_LANE = "the Ray lane"
# The other lane yields to the Ray lane, whose tests wait on real processes with deadlines.
OTHER_LANE_NICENESS = 5
LANE_FILE_KEY = "podmanager_ray_files"


def ray_files(items: list[pytest.Item]) -> set[str]:
    """The files (as node ids name them) that mark any collected test `ray`."""
    return {item.nodeid.split("::", 1)[0] for item in items if item.get_closest_marker("ray")}


class RayLaneScheduling(LoadScopeScheduling):
    """LoadScope's work units, with one unit for every Ray file: the first worker to ask gets
    it; file units for everyone else."""

    def __init__(self, config, log=None):  # type: ignore[no-untyped-def]
        super().__init__(config, log)
        self._ray_files: set[str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        if self._ray_files is None:  # every worker has collected (and written it) by now
            self._ray_files = set(json.loads(lane_file().read_text()))
        file = nodeid.split("::", 1)[0]
        return RAY_LANE if file in self._ray_files else file

    def _assign_work_unit(self, node) -> None:  # type: ignore[no-untyped-def]
        if RAY_LANE in self.workqueue:
            self.workqueue.move_to_end(RAY_LANE, last=False)  # the first worker to ask takes the lane
        super()._assign_work_unit(node)


@cache
def lane_file() -> Path:
    """In the controller: where the workers write the Ray files."""
    return Path(tempfile.mkdtemp(prefix="pm-lanes-")) / "ray-files.json"


def hand_lane_file(node) -> None:  # type: ignore[no-untyped-def]
    """In the controller, as it starts a worker: where the worker writes the Ray files."""
    node.workerinput[LANE_FILE_KEY] = str(lane_file())


def remove_lane_file() -> None:
    """In the controller, at the session's end."""
    if lane_file.cache_info().currsize:
        shutil.rmtree(lane_file().parent, ignore_errors=True)


def record_ray_files(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a worker, after collection: the Ray files, for the controller (every worker collects
    the same items, so whichever writes last writes the same)."""
    global _ray_files
    _ray_files = ray_files(items)
    lane_file = getattr(config, "workerinput", {}).get(LANE_FILE_KEY)
    if lane_file:
        partial = Path(f"{lane_file}.{os.getpid()}")
        partial.write_text(json.dumps(sorted(_ray_files)))
        partial.replace(lane_file)


_ray_files: set[str] = set()
_lane_settled = False


def settle_lane(item: pytest.Item) -> None:
    """In an xdist worker, at its first test: a worker of the other lane lowers its priority
    (and its children's) for the rest of the session."""
    global _lane_settled
    if _lane_settled or not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    _lane_settled = True
    if item.nodeid.split("::", 1)[0] not in _ray_files:
        os.nice(OTHER_LANE_NICENESS)
