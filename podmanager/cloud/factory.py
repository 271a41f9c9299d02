"""Choose the cloud backend for a spec: the simulator, the emulator, or Google Cloud."""

from __future__ import annotations

import os

from podmanager import paths
from podmanager.clock import Clock
from podmanager.cloud.base import TpuCloud
from podmanager.cloud.retry import RetryCallback, RetryingCloud
from podmanager.cloud.sim import NodeListener, SimCloud
from podmanager.spec import ClusterSpec, SimulationSpec


def simulated_cloud(project: str, simulation: SimulationSpec | None = None, *, clock: Clock | None = None) -> SimCloud:
    """The dry-run cloud of `project`, kept under $PODMANAGER_HOME so every process sees it."""
    simulation = simulation or SimulationSpec()
    return SimCloud(
        project,
        clock=clock,
        path=paths.sim_state_path(project),
        create_latency_s=simulation.create_latency_s,
        delete_latency_s=simulation.delete_latency_s,
        listeners=_sim_host_listeners(),
    )


def _sim_host_listeners() -> list[NodeListener]:
    # Imported here: the simulated hosts are Ray processes, needed only by the simulator.
    from podmanager.hosts.simhosts import SimHostBooter

    return [SimHostBooter()]


def make_cloud(spec: ClusterSpec, *, clock: Clock | None = None, on_retry: RetryCallback | None = None) -> TpuCloud:
    """The backend the spec asks for, retrying transient API errors."""
    if spec.simulated:
        return with_retries(simulated_cloud(spec.project, spec.simulation, clock=clock), clock=clock, on_retry=on_retry)
    from podmanager.cloud.gcp import GcpCloud, check_credentials

    emulator = os.environ.get("TPU_EMULATOR_HOST")
    if not emulator:
        check_credentials(spec.project)
    return GcpCloud(spec.project, emulator_host=emulator, on_retry=on_retry)  # type: ignore[return-value]


def with_retries(cloud: TpuCloud, *, clock: Clock | None = None, on_retry: RetryCallback | None = None) -> TpuCloud:
    """The simulator answers like a server, so its client side retries transient errors
    here; the real client (`gcp.py`) retries inside each call."""
    if cloud.backend == SimCloud.backend:
        return RetryingCloud(cloud, clock=clock, on_retry=on_retry)  # type: ignore[return-value]
    return cloud
