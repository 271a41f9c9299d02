"""Compute Engine VMs through `google-cloud-compute`, as typed records (`cloud/instances.py`):
the zones of a region, whether a zone offers a machine type, instances created, read, found by
label, started or resumed, and deleted (each change waited for through its zone operation), and the guest attributes
a VM wrote. What the controller VM (`controller_vm.py`) is made of.

Calls, retries, errors and the endpoint (Google's or a dry run's emulator) as `compute.py`'s.
"""

from __future__ import annotations

from typing import Any

from google.cloud import compute_v1

from podmanager.cloud import errors as cloud_errors
from podmanager.cloud.gcp.compute import ComputeClients
from podmanager.cloud.instances import Instance
from podmanager.cloud.network import region_of, short_name

# Debian 12: the controller installs its own Python with uv (its exact patch), so the image's does not matter.
IMAGE = "projects/debian-cloud/global/images/family/debian-12"


def _network_path(instance: Instance) -> str:
    project = f"projects/{instance.network_project}/" if instance.network_project else ""
    return f"{project}global/networks/{instance.network}"


def instance_message(instance: Instance) -> compute_v1.Instance:
    """The insert's body for `instance`."""
    nic = compute_v1.NetworkInterface(network=_network_path(instance))
    if instance.subnetwork:
        project = instance.network_project or ""
        prefix = f"projects/{project}/" if project else ""
        nic.subnetwork = f"{prefix}regions/{region_of(instance.zone)}/subnetworks/{instance.subnetwork}"
    if instance.external_ip:
        nic.access_configs = [compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")]
    return compute_v1.Instance(
        name=instance.name, machine_type=f"zones/{instance.zone}/machineTypes/{instance.machine_type}",
        labels=instance.labels, network_interfaces=[nic],
        service_accounts=[compute_v1.ServiceAccount(email=instance.service_account, scopes=instance.scopes)],
        metadata=compute_v1.Metadata(items=[compute_v1.Items(key=k, value=v) for k, v in instance.metadata.items()]),
        tags=compute_v1.Tags(items=instance.tags),
        disks=[compute_v1.AttachedDisk(boot=True, auto_delete=True, initialize_params=compute_v1.AttachedDiskInitializeParams(
            disk_size_gb=instance.disk_gb, source_image=instance.image or IMAGE))])


def instance_record(message: compute_v1.Instance) -> Instance:
    """An instance as the API reports it."""
    nic = message.network_interfaces[0] if message.network_interfaces else compute_v1.NetworkInterface()
    account = message.service_accounts[0] if message.service_accounts else compute_v1.ServiceAccount()
    network_parts = nic.network.split("/")
    boot = next((disk for disk in message.disks if disk.boot), None)
    return Instance(
        name=message.name, zone=short_name(message.zone), machine_type=short_name(message.machine_type),
        labels=dict(message.labels), network=short_name(nic.network or "default"),
        subnetwork=short_name(nic.subnetwork) if nic.subnetwork else "",
        network_project=network_parts[network_parts.index("projects") + 1] if "projects" in network_parts else "",
        external_ip=bool(nic.access_configs), service_account=account.email, scopes=list(account.scopes),
        metadata={item.key: item.value for item in message.metadata.items}, tags=list(message.tags.items),
        disk_gb=boot.disk_size_gb if boot is not None and boot.disk_size_gb else 10, status=message.status,
        internal_ip=nic.network_i_p,
        external_address=nic.access_configs[0].nat_i_p if nic.access_configs else "")


def label_filter(labels: dict[str, str]) -> str:
    """A list's `filter` for instances carrying all of `labels`: with several expressions Compute's
    grammar wants each within parentheses (its own definition of `filter`), so always parenthesized."""
    return " ".join(f'(labels.{key} = "{value}")' for key, value in sorted(labels.items()))


class ComputeInstances(ComputeClients):
    """One project's VMs through the Compute Engine API (see `ComputeClients` for the endpoint)."""

    def __init__(self, project: str, **options: Any):
        super().__init__(project, **options)
        self._zones = compute_v1.ZonesClient(**self.options)
        self._machine_types = compute_v1.MachineTypesClient(**self.options)
        self._instances = compute_v1.InstancesClient(**self.options)
        self._operations = compute_v1.ZoneOperationsClient(**self.options)

    def clients(self) -> tuple[Any, ...]:
        return self._zones, self._machine_types, self._instances, self._operations

    # ------------------------------------------------------------------ where

    def zones_by_region(self) -> dict[str, list[str]]:
        """The project's zones, by region, each region's by name (one paged list)."""
        messages = self._call("list zones", self._all_pages(self._zones.list), project=self.project)
        by_region: dict[str, list[str]] = {}
        for message in sorted(messages, key=lambda m: m.name):
            by_region.setdefault(short_name(message.region), []).append(message.name)
        return by_region

    def offers(self, zone: str, machine_type: str) -> bool:
        """Whether `zone` offers `machine_type` (False too for a zone the project does not have)."""
        try:
            self._call(f"get machine type {machine_type} in {zone}", self._machine_types.get, project=self.project,
                       zone=zone, machine_type=machine_type)
        except (cloud_errors.NotFoundError, cloud_errors.InvalidRequestError):
            return False
        return True

    # ------------------------------------------------------------------ instances

    def get(self, zone: str, name: str) -> Instance | None:
        try:
            return instance_record(self._call(f"get instance {name}", self._instances.get, project=self.project,
                                              zone=zone, instance=name))
        except cloud_errors.NotFoundError:
            return None

    def labelled(self, labels: dict[str, str]) -> list[Instance]:
        """Every instance of the project, in any zone, that carries all of `labels`."""
        query = label_filter(labels)
        scoped = self._call("list instances by label", self._all_pages(self._instances.aggregated_list),
                            project=self.project, filter=query)
        return [instance_record(m) for _, in_zone in scoped for m in in_zone.instances]

    def guest_attributes(self, zone: str, name: str, namespace: str = "podmanager") -> dict[str, str]:
        """The guest attributes the VM wrote under `namespace` (key -> value); {} when it wrote none
        yet (the API answers 404 for a query path with nothing under it) or the VM is not there."""
        try:
            found = self._call(f"get guest attributes of instance {name}", self._instances.get_guest_attributes,
                               project=self.project, zone=zone, instance=name, query_path=f"{namespace}/")
        except cloud_errors.NotFoundError:
            return {}
        return {entry.key: entry.value for entry in found.query_value.items if entry.namespace == namespace}

    def create(self, instance: Instance, *, timeout_s: float = 300.0) -> None:
        what = f"create instance {instance.name} in {instance.zone}"
        operation = self._call(what, self._instances.insert_unary, project=self.project, zone=instance.zone,
                               instance_resource=instance_message(instance))
        self._wait(operation, instance.zone, what, timeout_s)

    def delete(self, zone: str, name: str, *, timeout_s: float = 300.0) -> None:
        what = f"delete instance {name} in {zone}"
        operation = self._call(what, self._instances.delete_unary, project=self.project, zone=zone, instance=name)
        self._wait(operation, zone, what, timeout_s)

    def start(self, zone: str, name: str, *, timeout_s: float = 300.0) -> None:
        """A stopped (TERMINATED) instance started again: it boots, its startup script runs again."""
        what = f"start instance {name} in {zone}"
        operation = self._call(what, self._instances.start_unary, project=self.project, zone=zone, instance=name)
        self._wait(operation, zone, what, timeout_s)

    def resume(self, zone: str, name: str, *, timeout_s: float = 300.0) -> None:
        """A SUSPENDED instance resumed: its memory restored, what ran runs on."""
        what = f"resume instance {name} in {zone}"
        operation = self._call(what, self._instances.resume_unary, project=self.project, zone=zone, instance=name)
        self._wait(operation, zone, what, timeout_s)

    def _wait(self, operation: compute_v1.Operation, zone: str, what: str, timeout_s: float) -> None:
        self._wait_done(operation, lambda: self._wait_call(f"wait for {what}", self._operations.wait,
                                                           project=self.project, zone=zone, operation=operation.name),
                        what, timeout_s)
