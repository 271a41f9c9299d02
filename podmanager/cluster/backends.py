"""Choose the cloud backend for a spec: Google Cloud, or (dry runs) the project's local emulator.

Both go through the real client (`GcpCloud`); a dry run only differs in the endpoint, and in
polling at the pace of a simulated cloud rather than a real one."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import TYPE_CHECKING

from podmanager.cloud.base import SimulatedCloud, TpuCloud
from podmanager.cloud.retry import RetryCallback
from podmanager.core.cadence import GOOGLE_CLOUD, SIMULATED
from podmanager.core.clock import Clock
from podmanager.core.errors import PodmanagerError
from podmanager.core.spec import ClusterSpec

if TYPE_CHECKING:
    from podmanager.cloud.gcp.client import (
        GcpCloud,  # Google's client loads slowly: only when used
    )
    from podmanager.cloud.gcp.compute import ComputeNetworks
    from podmanager.cloud.gcp.instances import ComputeInstances
    from podmanager.cloud.gcp.project_iam import ProjectIam
    from podmanager.cloud.gcp.service_usage import ServiceUsage
    from podmanager.cloud.gcp.storage import BucketIam
    from podmanager.controller.cluster_hosts import LocalMachines
    from podmanager.emulator.control import EmulatorControl
    from podmanager.emulator.server import Emulator


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
        return simulated_cloud(spec.project or "", clock=clock, on_retry=on_retry, network=simulated_network(spec))
    from podmanager.cloud.gcp.client import GcpCloud, check_credentials

    emulator = os.environ.get("TPU_EMULATOR_HOST")
    if not emulator:
        check_credentials(spec.project)
    return GcpCloud(spec.project, emulator_host=emulator, on_retry=on_retry, **asdict(GOOGLE_CLOUD.tpu_api)), None


def emulator_json_api(spec: ClusterSpec) -> str | None:
    """Where the dry run's running emulator serves Google's JSON APIs (Compute Engine, Service
    Usage, IAM, Resource Manager); None when it does not run, or is from before it served them."""
    from podmanager.emulator import launcher

    found = launcher.running(spec.project or "")
    return found.compute_api if found is not None and found.compute_api else None


def make_compute(spec: ClusterSpec) -> ComputeNetworks | None:
    """The Compute Engine API of the spec's project, for the network's preflight: a dry run's
    emulator (running: `make_cloud` started it), or Google's with Application Default
    Credentials; None beside a `podmanager emulator` named by TPU_EMULATOR_HOST, or an
    emulator from before it served Compute Engine."""
    from podmanager.cloud.gcp.compute import ComputeNetworks

    if spec.simulated:
        endpoint = emulator_json_api(spec)
        if endpoint is None:
            return None
        return ComputeNetworks(spec.project or "", endpoint=endpoint, **asdict(SIMULATED.compute_api))
    if os.environ.get("TPU_EMULATOR_HOST"):
        return None
    from podmanager.cloud.gcp.client import check_credentials

    return ComputeNetworks(spec.project or "", credentials=check_credentials(spec.project or ""),
                           **asdict(GOOGLE_CLOUD.compute_api))


def make_instances(spec: ClusterSpec) -> ComputeInstances:
    """Compute Engine's VMs of the spec's project (the controller VM), where `make_compute`
    finds Compute Engine: a dry run's emulator (started if it is not running), or Google's."""
    from podmanager.cloud.gcp.instances import ComputeInstances

    if spec.simulated:
        from podmanager.emulator import launcher
        from podmanager.emulator.control import EmulatorControl

        with EmulatorControl(launcher.ensure(spec.project or "", simulated_network(spec))) as control:
            configure_simulation(spec, control)  # how long its VMs take, before any is made
        endpoint = emulator_json_api(spec)
        if endpoint is None:
            raise PodmanagerError(f"the dry run's emulator of {spec.project} serves no Compute Engine API",
                                  hint="Stop it ('podmanager emulator stop') so the next command starts a current one.")
        return ComputeInstances(spec.project or "", endpoint=endpoint, **asdict(SIMULATED.compute_api))
    from podmanager.cloud.gcp.client import check_credentials

    return ComputeInstances(spec.project or "", credentials=check_credentials(spec.project or ""),
                            **asdict(GOOGLE_CLOUD.compute_api))


def configure_simulation(spec: ClusterSpec, simulator: SimulatedCloud) -> None:
    """Hand the spec's `simulation` (latencies, VM image, boot delay) to its simulated cloud."""
    simulation = spec.simulation
    simulator.configure_cluster(spec.name, simulation.create_latency_s, simulation.delete_latency_s,
                                simulation.vm_image, boot_delay_s=simulation.boot_delay_s,
                                instance_create_latency_s=simulation.instance_create_latency_s,
                                instance_delete_latency_s=simulation.instance_delete_latency_s)


def make_networks(spec: ClusterSpec) -> ComputeNetworks:
    """`make_compute`, which must be there (the controller VM's rule)."""
    if spec.simulated:
        make_instances(spec).close()  # the emulator started, as that checks
    found = make_compute(spec)
    if found is None:
        raise PodmanagerError("no Compute Engine API for the controller VM's firewall rule (TPU_EMULATOR_HOST names "
                              "a bare emulator)", hint="Unset TPU_EMULATOR_HOST.")
    return found


def simulated_laptop_address(spec: ClusterSpec) -> str | None:
    """A dry run's laptop as its simulated VMs see it: its home router's address on the simulated
    internet in the emulator's namespace mode; None in the loopback mode (VMs share its loopback)."""
    if not spec.simulated:
        return None
    from podmanager.emulator import launcher

    return launcher.laptop_public(spec.project or "") or None


def secrets_host(spec: ClusterSpec) -> str | None:
    """Where a dry run's Secret Manager is (its emulator, started if it is not running); None on
    Google Cloud (the client finds Google's)."""
    if not spec.simulated:
        return None
    from podmanager.emulator import launcher

    return launcher.ensure(spec.project or "", simulated_network(spec))


def make_buckets(spec: ClusterSpec) -> BucketIam | None:
    """Cloud Storage's bucket calls, for the buckets' preflight, where `make_compute` finds
    Compute Engine: a dry run's emulator, or Google's with Application Default Credentials."""
    from podmanager.cloud.gcp.storage import BucketIam

    if spec.simulated:
        from podmanager.emulator import launcher

        found = launcher.running(spec.project or "")
        if found is None or not found.buckets_api:
            return None
        return BucketIam(endpoint=found.buckets_api, retry_delay_s=0.05)
    if os.environ.get("TPU_EMULATOR_HOST"):
        return None
    from podmanager.cloud.gcp.client import check_credentials

    return BucketIam(credentials=check_credentials(spec.project or ""))


def make_service_usage(spec: ClusterSpec) -> ServiceUsage | None:
    """Service Usage of the spec's project, for the preflight's check of the APIs, where
    `make_compute` finds Compute Engine: a dry run's emulator, or Google's."""
    from podmanager.cloud.gcp.service_usage import ServiceUsage

    if spec.simulated:
        endpoint = emulator_json_api(spec)
        if endpoint is None:
            return None
        return ServiceUsage(spec.project or "", endpoint=endpoint)
    if os.environ.get("TPU_EMULATOR_HOST"):
        return None
    from podmanager.cloud.gcp.client import check_credentials

    return ServiceUsage(spec.project or "", credentials=check_credentials(spec.project or ""))


def make_project_iam(spec: ClusterSpec) -> ProjectIam | None:
    """The project's service accounts and IAM policy (IAM and Resource Manager), where
    `make_compute` finds Compute Engine: a dry run's emulator, or Google's."""
    from podmanager.cloud.gcp.project_iam import ProjectIam

    if spec.simulated:
        from podmanager.cloud.gcp.emulator_identity import principal

        endpoint = emulator_json_api(spec)
        if endpoint is None:
            return None
        return ProjectIam(spec.project or "", endpoint=endpoint, caller=principal(), pause_s=0.05)
    if os.environ.get("TPU_EMULATOR_HOST"):
        return None
    from podmanager.cloud.gcp.client import check_credentials

    return ProjectIam(spec.project or "", credentials=check_credentials(spec.project or ""))


def stop_emulator_if_idle(project: str) -> bool:
    """Stop a dry-run project's emulator when it holds nothing any more; True if it was stopped."""
    from podmanager.emulator import launcher

    return launcher.stop_if_idle(project)


def crash_controller_vm(spec: ClusterSpec) -> str | None:
    """Kill a dry-run cluster's controller VM and boot it again on its disk (the project's emulator
    does); its name, None when the project's emulator runs no controller VM of the cluster."""
    from podmanager.emulator import launcher
    from podmanager.emulator.control import EmulatorControl

    found = launcher.running(spec.project or "")
    if found is None:
        return None
    with EmulatorControl(found.address) as control:
        return control.crash_controller_vm(spec.name)


def change_simulated_project(project: str, **changes: object) -> dict[str, object]:
    """What the console would do to a dry run's project (its kind, a role granted or revoked,
    APIs enabled: `Emulator.change_project`), through its emulator (started if it is not
    running); the project's policy and enabled APIs as they are then."""
    from podmanager.emulator import launcher
    from podmanager.emulator.control import EmulatorControl
    from podmanager.emulator.control_verbs import PROJECT, ProjectChange

    with EmulatorControl(launcher.ensure(project)) as control:
        asked = ProjectChange.model_validate({key: value for key, value in changes.items() if value})
        return control.ask(PROJECT, asked).model_dump(mode="json")


def halt_controller_vm(spec: ClusterSpec, state: str) -> str | None:
    """Stop (TERMINATED) or suspend (SUSPENDED) a dry-run cluster's controller VM (the project's
    emulator does); its name, None when the project's emulator runs no controller VM of the cluster."""
    from podmanager.emulator import launcher
    from podmanager.emulator.control import EmulatorControl

    found = launcher.running(spec.project or "")
    if found is None:
        return None
    with EmulatorControl(found.address) as control:
        return control.halt_controller_vm(spec.name, state)


def standalone_emulator(project: str, create_latency_s: float) -> Emulator:
    """An in-memory emulator for `podmanager emulator`, not yet serving."""
    from podmanager.emulator.server import (
        Emulator,  # gRPC and the client types load slowly
    )

    return Emulator(project, persist=False, create_latency_s=create_latency_s)


def vms_in_namespaces(spec: ClusterSpec) -> bool:
    """Whether the spec's project's emulator (running: `up` has opened the cloud) runs its VMs
    in network namespaces, where this machine stands outside the VPC as a laptop does."""
    from podmanager.emulator import launcher

    found = launcher.running(spec.project or "")
    return found is not None and bool(found.laptop_public)


def simulated_network(spec: ClusterSpec) -> str | None:
    """The network mode the spec asks of its project's emulator; None: whichever it runs."""
    return None if spec.simulation.network == "default" else spec.simulation.network


def simulated_cloud(project: str, *, clock: Clock | None = None, on_retry: RetryCallback | None = None,
                    network: str | None = None) -> tuple[GcpCloud, EmulatorControl]:
    """The real client on the project's local emulator (started if it is not running), and its
    control service. A call the emulator did not answer (it died) restarts it before the retry."""
    from podmanager.emulator import launcher

    def restart_then_report(call: str, error: BaseException, attempt: int) -> None:
        launcher.ensure(project)
        if on_retry is not None:
            on_retry(call, error, attempt)

    with ThreadPoolExecutor(max_workers=1) as starter:
        # A first command starts the emulator (most of a second) while it loads the client.
        starting = starter.submit(launcher.ensure, project, network)
        from podmanager.cloud.gcp.client import GcpCloud
        from podmanager.emulator.control import EmulatorControl

        address = starting.result()
    cloud = GcpCloud(project, emulator_host=address, clock=clock, on_retry=restart_then_report,
                     **asdict(SIMULATED.tpu_api))
    return cloud, EmulatorControl(address)
