"""`python -m podmanager.operations.sim_wake PROJECT WHEN CLUSTER`: one simulator timer (see sim_timers).

Sleeps until WHEN, then reads the simulated cloud of PROJECT once: that applies every
transition whose time has come, and the listeners boot or kill the simulated VMs."""

from __future__ import annotations

import os
import sys
import time

from podmanager.operations import sim_timers
from podmanager.operations.backends import simulated_cloud

LATE_S = 0.05  # wake just after the moment, so the transition is due


def main(argv: list[str]) -> int:
    project, when, cluster = argv[0], float(argv[1]), argv[2] or None
    time.sleep(max(0.0, when - time.time()) + LATE_S)
    try:
        simulated_cloud(project).all_nodes()
    finally:
        sim_timers.forget(cluster, os.getpid())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
