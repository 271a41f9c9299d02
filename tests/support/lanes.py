"""Two lanes for the suite under pytest-xdist (`-n 2`, set in pyproject.toml): every test file
that needs Ray runs on one worker, file after file, as in a one-process run (two Ray clusters
at once on 2 cores miss their deadlines); the other files run meanwhile on the other worker,
one file at a time, in what CPU the Ray lane leaves. The Ray worker takes files of the other
lane once its own is done.

A file needs Ray when it marks any test `ray` (`pytest.mark.ray`); the whole file goes to the
Ray lane, so its module fixtures are set up once. Files that start JAX processes or a simulated
VM but no Ray (`pytest.mark.processes`) run in the other lane: their processes have no deadline
that a slower CPU share misses.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from xdist.scheduler import LoadScopeScheduling

RAY_LANE = "the Ray lane"
# The other lane yields to the Ray lane, whose tests wait on real processes with deadlines.
OTHER_LANE_NICENESS = 5


@lru_cache(maxsize=None)
def needs_ray(path: Path) -> bool:
    """Whether the test file marks any of its tests `ray`."""
    return "pytest.mark.ray" in path.read_text(encoding="utf-8")


class RayLaneScheduling(LoadScopeScheduling):
    """LoadScope's work units, with one unit for every Ray file: the first worker to ask gets
    it; file units for everyone else."""

    def _split_scope(self, nodeid: str) -> str:
        file = nodeid.split("::", 1)[0]
        return RAY_LANE if needs_ray(self.config.rootpath / file) else file

    def _assign_work_unit(self, node) -> None:  # type: ignore[no-untyped-def]
        if RAY_LANE in self.workqueue:
            self.workqueue.move_to_end(RAY_LANE, last=False)  # the first worker to ask takes the lane
        super()._assign_work_unit(node)


_lane_settled = False


def settle_lane(path: Path) -> None:
    """In an xdist worker, at its first test: a worker of the other lane lowers its priority
    (and its children's) for the rest of the session."""
    global _lane_settled
    if _lane_settled or not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    _lane_settled = True
    if not needs_ray(path):
        os.nice(OTHER_LANE_NICENESS)
