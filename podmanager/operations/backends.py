"""Choose the cloud backend for a spec: the simulator, the emulator, or Google Cloud."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from podmanager.cloud.base import TpuCloud
from podmanager.cloud.retry import RetryCallback, RetryingCloud
from podmanager.cloud.sim.cloud import NodeListener, SimCloud
from podmanager.core import paths
from podmanager.core.clock import Clock, RealClock
from podmanager.core.spec import ClusterSpec, SimulationSpec

if TYPE_CHECKING:
    from podmanager.hosts.controller import LocalMachines  # Ray loads only when hosts are used


def simulated_cloud(project: str, simulation: SimulationSpec | None = None, *, clock: Clock | None = None) -> SimCloud:
    """The dry-run cloud of `project`, kept under $PODMANAGER_HOME so every process sees it."""
    simulation = simulation or SimulationSpec()
    return SimCloud(
        project,
        clock=clock,
        path=paths.sim_state_path(project),
        create_latency_s=simulation.create_latency_s,
        delete_latency_s=simulation.delete_latency_s,
        listeners=_sim_host_listeners(paths.sim_state_path(project)),
        on_timed=_timer(project) if clock is None or isinstance(clock, RealClock) else None,
    )


def _timer(project: str):  # type: ignore[no-untyped-def]
    """A detached timer per scheduled fault, so it fires on time (not with a manual clock)."""
    from podmanager.operations import sim_timers

    return lambda when, cluster: sim_timers.schedule(project, when, cluster)


def _sim_host_listeners(state_file: Path) -> list[NodeListener]:
    # Imported here: the simulated hosts are Ray processes, needed only by the simulator.
    from podmanager.hosts.sim.vms import SimHostBooter

    return [SimHostBooter(state_file=state_file)]


def local_machines(spec: ClusterSpec) -> LocalMachines | None:
    """The simulated VMs' ground truth for the host controller; None on a real cloud."""
    if not spec.simulated:
        return None
    from podmanager.hosts.sim.vms import SimulatedMachines

    return SimulatedMachines()


def make_cloud(spec: ClusterSpec, *, clock: Clock | None = None,
               on_retry: RetryCallback | None = None) -> tuple[TpuCloud, SimCloud | None]:
    """The backend the spec asks for, retrying transient API errors, and (dry runs) the
    simulator behind it, for fault injection."""
    if spec.simulated:
        simulator = simulated_cloud(spec.project, spec.simulation, clock=clock)
        return simulator_client(simulator, clock=clock, on_retry=on_retry), simulator
    from podmanager.cloud.gcp.client import GcpCloud, check_credentials

    emulator = os.environ.get("TPU_EMULATOR_HOST")
    if not emulator:
        check_credentials(spec.project)
    return GcpCloud(spec.project, emulator_host=emulator, on_retry=on_retry), None


def simulator_client(simulator: SimCloud, *, clock: Clock | None = None,
                     on_retry: RetryCallback | None = None) -> TpuCloud:
    """The simulator answers like a server, so its client side retries transient errors
    here; the real client (`gcp/client.py`) retries inside each call."""
    return RetryingCloud(simulator, clock=clock, on_retry=on_retry)
