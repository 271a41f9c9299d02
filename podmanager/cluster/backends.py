"""Choose the cloud backend for a spec: Google Cloud, or (dry runs) the project's local emulator.

Both go through the real client (`GcpCloud`); a dry run only differs in the endpoint, and in
polling at the pace of a simulated cloud rather than a real one."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from podmanager.cloud.base import SimulatedCloud, TpuCloud
from podmanager.cloud.retry import RetryCallback
from podmanager.core.clock import Clock
from podmanager.core.spec import ClusterSpec

if TYPE_CHECKING:
    from podmanager.cloud.gcp.client import GcpCloud  # Google's client loads slowly: only when used
    from podmanager.cloud.gcp.compute import ComputeNetworks
    from podmanager.controller.host_controller import LocalMachines  # Ray loads only when hosts are used
    from podmanager.emulator.control import EmulatorControl
    from podmanager.emulator.server import Emulator

# The real client's timing, at the pace of the local emulator: its operations take
# `simulation.create_latency_s`, not minutes, and a restarted emulator is back within a second.
DRY_RUN_TIMING = {"poll_interval_s": 0.05, "retry_initial_s": 0.05, "retry_max_s": 0.5, "retry_deadline_s": 60.0,
                  "call_timeout_s": 30.0}


def local_machines(spec: ClusterSpec) -> LocalMachines | None:
    """The simulated VMs' ground truth for the host controller; None on a real cloud."""
    if not spec.simulated:
        return None
    from podmanager.emulator.vms import SimulatedMachines

    return SimulatedMachines()


def make_cloud(spec: ClusterSpec, *, clock: Clock | None = None,
               on_retry: RetryCallback | None = None) -> tuple[TpuCloud, SimulatedCloud | None]:
    """The backend the spec asks for, retrying transient API errors, and (dry runs) the
    emulator's control service, for fault injection."""
    if spec.simulated:
        return simulated_cloud(spec.project or "", clock=clock, on_retry=on_retry)
    from podmanager.cloud.gcp.client import GcpCloud, check_credentials

    emulator = os.environ.get("TPU_EMULATOR_HOST")
    if not emulator:
        check_credentials(spec.project)
    return GcpCloud(spec.project, emulator_host=emulator, on_retry=on_retry), None


def make_compute(spec: ClusterSpec) -> ComputeNetworks | None:
    """The Compute Engine API of the spec's project, for the network's preflight: a dry run's
    emulator (running: `make_cloud` started it), or Google's with Application Default
    Credentials; None beside a `podmanager emulator` named by TPU_EMULATOR_HOST, or an
    emulator from before it served Compute Engine."""
    from podmanager.cloud.gcp.compute import ComputeNetworks

    if spec.simulated:
        from podmanager.emulator import launcher

        found = launcher.running(spec.project or "")
        if found is None or not found.compute_api:
            return None
        return ComputeNetworks(spec.project or "", endpoint=found.compute_api, retry_initial_s=0.05, retry_max_s=0.5,
                               poll_interval_s=0.05)
    if os.environ.get("TPU_EMULATOR_HOST"):
        return None
    from podmanager.cloud.gcp.client import check_credentials

    return ComputeNetworks(spec.project or "", credentials=check_credentials(spec.project or ""))


def stop_emulator_if_idle(project: str) -> bool:
    """Stop a dry-run project's emulator when it holds nothing any more; True if it was stopped."""
    from podmanager.emulator import launcher

    return launcher.stop_if_idle(project)


def standalone_emulator(project: str, create_latency_s: float) -> Emulator:
    """An in-memory emulator for `podmanager emulator`, not yet serving."""
    from podmanager.emulator.server import Emulator  # gRPC and the client types load slowly

    return Emulator(project, persist=False, create_latency_s=create_latency_s)


def simulated_cloud(project: str, *, clock: Clock | None = None,
                    on_retry: RetryCallback | None = None) -> tuple[GcpCloud, EmulatorControl]:
    """The real client on the project's local emulator (started if it is not running), and its
    control service. A call the emulator did not answer (it died) restarts it before the retry."""
    from podmanager.emulator import launcher

    def restart_then_report(call: str, error: BaseException, attempt: int) -> None:
        launcher.ensure(project)
        if on_retry is not None:
            on_retry(call, error, attempt)

    with ThreadPoolExecutor(max_workers=1) as starter:
        # A first command starts the emulator (most of a second) while it loads the client.
        starting = starter.submit(launcher.ensure, project)
        from podmanager.cloud.gcp.client import GcpCloud
        from podmanager.emulator.control import EmulatorControl

        address = starting.result()
    cloud = GcpCloud(project, emulator_host=address, clock=clock, on_retry=restart_then_report, **DRY_RUN_TIMING)
    return cloud, EmulatorControl(address)
