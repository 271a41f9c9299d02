"""Rebuilding a lost or damaged state store from what outlives it: each cluster's spec copy
in its folder (`clusters/<name>/spec.json`) and, for dry runs, the simulated cloud. What
cannot be rebuilt: the run history and the event log."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from podmanager.cluster import backends
from podmanager.cluster.backends import simulated_cloud
from podmanager.cluster.teardown import simulated_projects
from podmanager.core.errors import PodmanagerError, StateStoreError
from podmanager.core.events import EventKind
from podmanager.core.spec import parse_spec
from podmanager.state import StateStore
from podmanager.state.db import (
    default_path,
    move_aside,
    recorded_clusters,
    spec_copy_path,
)
from podmanager.state.run_records import RunStore

LOST = ("the run history and the event log (each run's output stays in clusters/<name>/runs/); "
        "runs still going stop, since their supervisors can no longer record them")


@dataclass(frozen=True)
class RebuildReport:
    path: Path
    problem: str | None  # what was wrong with the store; None: it was fine
    rebuilt: bool
    moved_aside: list[Path] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)  # clusters recorded again from their spec copy
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (cluster, why its spec copy was not used)
    # (cluster, simulated project): labelled nodes in the simulated cloud that no spec copy names
    unknown_in_cloud: list[tuple[str, str]] = field(default_factory=list)


def store_problem() -> StateStoreError | None:
    """Why the state store cannot be used, or None when it can."""
    try:
        StateStore().close()
        RunStore().close()
    except StateStoreError as error:
        return error
    return None


def rebuild_state(*, force: bool = False) -> RebuildReport:
    """Move a missing or damaged store aside and rebuild it (`force`: even a healthy one)."""
    path = default_path()
    problem = store_problem()
    if problem is None and not force:
        return RebuildReport(path, None, rebuilt=False)
    moved = move_aside(path)
    store = StateStore(path, rebuild=True)
    RunStore(path).close()  # the runs table, empty
    restored: list[str] = []
    skipped: list[tuple[str, str]] = []
    for name in recorded_clusters(store.folder):
        try:
            copy = json.loads(spec_copy_path(store.folder, name).read_text())
            spec = parse_spec(copy["spec"], source=f"spec copy of {name}")
        except (OSError, ValueError, KeyError, TypeError, PodmanagerError) as error:
            skipped.append((name, str(error).splitlines()[0]))
            continue
        store.save_cluster(name, spec, "rebuilt")
        where = f" (the damaged store is kept as {moved[0]})" if moved else ""
        store.add_event(name, EventKind.STATE_REBUILT, f"state store rebuilt from the spec copy of {name}{where}; "
                        "its runs and events before now are lost")
        restored.append(name)
    unknown = []
    for project in simulated_projects():
        cloud, control = simulated_cloud(project)
        nodes = control.all_nodes()
        for channel in (cloud, control):
            channel.close()
        backends.stop_emulator_if_idle(project)  # started only to look: an empty project's goes again
        for node in nodes:
            if node.cluster and node.cluster not in restored and (node.cluster, project) not in unknown:
                unknown.append((node.cluster, project))
    store.close()
    return RebuildReport(path, problem.message if problem else None, True, moved, restored, skipped, unknown)
