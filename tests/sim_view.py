"""What a test sees of a dry run's simulated cloud, without changing it: the emulator's own
view while it runs, else the state it saved when it stopped (no emulator is started to look)."""

from __future__ import annotations

from podmanager.cloud.base import Node
from podmanager.core import paths
from podmanager.emulator import launcher
from podmanager.emulator.control import EmulatorControl
from podmanager.emulator.sim.records import SimState

PROJECT = "podmanager-sim"


def sim_nodes(project: str = PROJECT) -> list[Node]:
    running = launcher.running(project)
    if running is not None:
        with EmulatorControl(running.address) as control:
            return control.all_nodes()
    saved = paths.sim_state_path(project)
    if not saved.exists():
        return []
    return [record.to_node() for record in SimState.model_validate_json(saved.read_text()).nodes.values()]


def sim_control(project: str = PROJECT) -> EmulatorControl:
    """The project's emulator's controls (started if it is not running)."""
    return EmulatorControl(launcher.ensure(project))
