"""What the processes of the race tests run: a module of its own, so that a spawned process
imports only what its work needs (not the test module and everything it imports)."""

from __future__ import annotations

import os
from typing import Any


def claim_rounds(home: str, worker: int, rounds: int, barrier: Any, results: Any) -> None:
    """In every round, claim slice 0 of that round's cluster at the same moment as the
    other processes; put (round, run id, the run in the way or None)."""
    os.environ["PODMANAGER_HOME"] = home
    from podmanager.state.runs import RunRecord, RunStore

    runs = RunStore()
    for round_ in range(rounds):
        barrier.wait(timeout=60)
        run = RunRecord(f"r{round_}-w{worker}", f"c{round_}", {}, [0], {}, None)
        holder = runs.claim(run)
        results.put((round_, run.run_id, None if holder is None else holder.run_id))

