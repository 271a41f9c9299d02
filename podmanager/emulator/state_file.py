"""The simulated cloud of one project on disk: loaded once when its emulator starts, saved
atomically when it changed (at most every `SAVE_EVERY_S`), never read per call."""

from __future__ import annotations

import logging
from pathlib import Path

from podmanager.core import paths
from podmanager.core.errors import PodmanagerError
from podmanager.core.files import write_atomic
from podmanager.emulator.sim.cloud import SimCloud
from podmanager.emulator.sim.records import SimState

log = logging.getLogger(__name__)

# Saving coalesces: an `up` of 1,024 slices changes the state thousands of times a second, and
# each save writes it whole. What the last fraction of a second changed and a killed emulator
# did not save, the provisioner's next look finds missing and makes again (it is level-triggered).
SAVE_EVERY_S = 0.2


def path(project: str) -> Path:
    return paths.sim_state_path(project)


def secrets_path(project: str) -> Path:
    """The simulated Secret Manager's secrets (tokens: owner-only), beside the project's state."""
    return paths.sim_home() / "sim" / "secrets" / f"{paths.one_name(project, 'project')}.json"


def load(project: str) -> SimState | None:
    """The saved state of `project`, None if it has none yet."""
    where = path(project)
    try:
        text = where.read_text()
    except FileNotFoundError:
        return None
    try:
        return SimState.model_validate_json(text)
    except ValueError as damaged:
        raise PodmanagerError(f"the simulated cloud's state {where} is damaged ({damaged.__class__.__name__})",
                              hint=f"Delete {where} to start the simulated project {project} afresh.") from None


def save(project: str, sim: SimCloud) -> bool:
    """Write the state if it changed since the last save; whether it wrote."""
    snapshot = sim.snapshot()
    if snapshot is None:
        return False
    version, text = snapshot
    path(project).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path(project), text)
    sim.saved(version)
    return True
