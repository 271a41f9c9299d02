"""Compute Engine VMs through its REST API as plain JSON, as typed records (`cloud/instances.py`):
the zones of a region, whether a zone offers a machine type, instances created, read, found by
label, started, resumed, stopped or reset, their metadata and machine type changed and their disk grown, and
deleted (each change waited for through its zone operation), and the guest attributes a VM wrote. What the controller VM (`controller_vm.py`) is made of.

Calls, retries, errors, pages and the endpoint (Google's or a dry run's emulator) as `compute.py`'s.
"""

from __future__ import annotations

from podmanager.cloud import errors as cloud_errors
from podmanager.cloud.gcp.compute import ComputeClients, Json, path
from podmanager.cloud.instances import Instance
from podmanager.cloud.network import region_of, short_name

# Debian 12: the controller installs its own Python with uv (its exact patch), so the image's does not matter.
IMAGE = "projects/debian-cloud/global/images/family/debian-12"


def _network_path(instance: Instance) -> str:
    project = f"projects/{instance.network_project}/" if instance.network_project else ""
    return f"{project}global/networks/{instance.network}"


def instance_body(instance: Instance) -> Json:
    """The insert's body for `instance` (Instance's JSON)."""
    nic: Json = {"network": _network_path(instance)}
    if instance.subnetwork:
        project = instance.network_project or ""
        prefix = f"projects/{project}/" if project else ""
        nic["subnetwork"] = f"{prefix}regions/{region_of(instance.zone)}/subnetworks/{instance.subnetwork}"
    if instance.external_ip:
        nic["accessConfigs"] = [{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}]
    return {
        "name": instance.name, "machineType": f"zones/{instance.zone}/machineTypes/{instance.machine_type}",
        "labels": instance.labels, "networkInterfaces": [nic],
        "serviceAccounts": [{"email": instance.service_account, "scopes": instance.scopes}],
        "metadata": {"items": [{"key": k, "value": v} for k, v in instance.metadata.items()]},
        "tags": {"items": instance.tags},
        # diskSizeGb is an int64: a string in JSON (https://protobuf.dev/programming-guides/json/)
        "disks": [{"boot": True, "autoDelete": True, "initializeParams": {
            "diskSizeGb": str(instance.disk_gb), "sourceImage": instance.image or IMAGE}}]}


def instance_record(found: Json) -> Instance:
    """An instance as the API reports it."""
    nic = (found.get("networkInterfaces") or [{}])[0]
    account = (found.get("serviceAccounts") or [{}])[0]
    network_parts = nic.get("network", "").split("/")
    boot = next((disk for disk in found.get("disks", []) if disk.get("boot")), {})
    access = nic.get("accessConfigs", [])
    return Instance(
        name=found["name"], zone=short_name(found.get("zone", "")), machine_type=short_name(found.get("machineType", "")),
        labels=found.get("labels", {}), network=short_name(nic.get("network") or "default"),
        subnetwork=short_name(nic["subnetwork"]) if nic.get("subnetwork") else "",
        network_project=network_parts[network_parts.index("projects") + 1] if "projects" in network_parts else "",
        external_ip=bool(access), service_account=account.get("email", ""), scopes=account.get("scopes", []),
        metadata={item["key"]: item.get("value", "") for item in found.get("metadata", {}).get("items", [])},
        tags=found.get("tags", {}).get("items", []), disk_gb=int(boot.get("diskSizeGb") or 10),
        status=found.get("status", ""), internal_ip=nic.get("networkIP", ""),
        external_address=access[0].get("natIP", "") if access else "",
        disk=short_name(boot.get("source", "")), metadata_fingerprint=found.get("metadata", {}).get("fingerprint", ""))


def label_filter(labels: dict[str, str]) -> str:
    """A list's `filter` for instances carrying all of `labels`: with several expressions Compute's
    grammar wants each within parentheses (its own definition of `filter`), so always parenthesized."""
    return " ".join(f'(labels.{key} = "{value}")' for key, value in sorted(labels.items()))


class ComputeInstances(ComputeClients):
    """One project's VMs through the Compute Engine API (see `ComputeClients` for the endpoint)."""

    def _zone(self, zone: str, *rest: str) -> str:
        return path("projects", self.project, "zones", zone, *rest)

    # ------------------------------------------------------------------ where

    def zones_by_region(self) -> dict[str, list[str]]:
        """The project's zones, by region, each region's by name (one paged list)."""
        found = self._pages("list zones", path("projects", self.project, "zones"))
        by_region: dict[str, list[str]] = {}
        for zone in sorted(found, key=lambda z: z["name"]):
            by_region.setdefault(short_name(zone.get("region", "")), []).append(zone["name"])
        return by_region

    def offers(self, zone: str, machine_type: str) -> bool:
        """Whether `zone` offers `machine_type` (False too for a zone the project does not have)."""
        try:
            self._call(f"get machine type {machine_type} in {zone}", "GET", self._zone(zone, "machineTypes", machine_type))
        except (cloud_errors.NotFoundError, cloud_errors.InvalidRequestError):
            return False
        return True

    # ------------------------------------------------------------------ instances

    def get(self, zone: str, name: str) -> Instance | None:
        try:
            return instance_record(self._call(f"get instance {name}", "GET", self._zone(zone, "instances", name)))
        except cloud_errors.NotFoundError:
            return None

    def labelled(self, labels: dict[str, str]) -> list[Instance]:
        """Every instance of the project, in any zone, that carries all of `labels`."""
        scoped = self._pages("list instances by label", path("projects", self.project, "aggregated", "instances"),
                             {"filter": label_filter(labels)})
        return [instance_record(found) for _, in_zone in scoped for found in in_zone.get("instances", [])]

    def guest_attributes(self, zone: str, name: str, namespace: str = "podmanager") -> dict[str, str]:
        """The guest attributes the VM wrote under `namespace` (key -> value); {} when it wrote none
        yet (the API answers 404 for a query path with nothing under it) or the VM is not there."""
        try:
            found = self._call(f"get guest attributes of instance {name}", "GET",
                               self._zone(zone, "instances", name, "getGuestAttributes"),
                               params={"queryPath": f"{namespace}/"})
        except cloud_errors.NotFoundError:
            return {}
        return {entry["key"]: entry.get("value", "") for entry in found.get("queryValue", {}).get("items", [])
                if entry.get("namespace") == namespace}

    def create(self, instance: Instance, *, timeout_s: float = 300.0) -> None:
        what = f"create instance {instance.name} in {instance.zone}"
        operation = self._call(what, "POST", self._zone(instance.zone, "instances"), body=instance_body(instance))
        self._wait(operation, instance.zone, what, timeout_s)

    def delete(self, zone: str, name: str, *, timeout_s: float = 300.0) -> None:
        what = f"delete instance {name} in {zone}"
        operation = self._call(what, "DELETE", self._zone(zone, "instances", name))
        self._wait(operation, zone, what, timeout_s)

    def start(self, zone: str, name: str, *, timeout_s: float = 300.0) -> None:
        """A stopped (TERMINATED) instance started again: it boots, its startup script runs again."""
        what = f"start instance {name} in {zone}"
        operation = self._call(what, "POST", self._zone(zone, "instances", name, "start"))
        self._wait(operation, zone, what, timeout_s)

    def resume(self, zone: str, name: str, *, timeout_s: float = 300.0) -> None:
        """A SUSPENDED instance resumed: its memory restored, what ran runs on."""
        what = f"resume instance {name} in {zone}"
        operation = self._call(what, "POST", self._zone(zone, "instances", name, "resume"))
        self._wait(operation, zone, what, timeout_s)

    def stop(self, zone: str, name: str, *, timeout_s: float = 300.0) -> None:
        """A running instance stopped (TERMINATED): its processes end, its disk stays."""
        self._post(zone, name, "stop", None, timeout_s)

    def reset(self, zone: str, name: str, *, timeout_s: float = 300.0) -> None:
        """A running instance reset: it boots again on its disk (its startup script runs again)."""
        self._post(zone, name, "reset", None, timeout_s)

    def set_machine_type(self, zone: str, name: str, machine_type: str, *, timeout_s: float = 300.0) -> None:
        """A stopped instance's machine type changed (Google refuses it on a running one)."""
        self._post(zone, name, "setMachineType", {"machineType": f"zones/{zone}/machineTypes/{machine_type}"},
                   timeout_s)

    def set_metadata(self, instance: Instance, metadata: dict[str, str], *, timeout_s: float = 300.0) -> None:
        """The instance's metadata replaced by `metadata`, given the fingerprint `instance` was read
        with (a change made since it was read fails: 412, InvalidRequestError)."""
        self._post(instance.zone, instance.name, "setMetadata",
                   {"fingerprint": instance.metadata_fingerprint,
                    "items": [{"key": key, "value": value} for key, value in metadata.items()]}, timeout_s)

    def resize_disk(self, zone: str, disk: str, size_gb: int, *, timeout_s: float = 300.0) -> None:
        """A disk grown to `size_gb` (Google refuses a smaller size)."""
        what = f"resize disk {disk} in {zone} to {size_gb} GB"
        # sizeGb is an int64: a string in JSON (https://protobuf.dev/programming-guides/json/)
        operation = self._call(what, "POST", self._zone(zone, "disks", disk, "resize"), body={"sizeGb": str(size_gb)})
        self._wait(operation, zone, what, timeout_s)

    def _post(self, zone: str, name: str, verb: str, body: Json | None, timeout_s: float) -> None:
        what = f"{verb} instance {name} in {zone}"
        operation = self._call(what, "POST", self._zone(zone, "instances", name, verb), body=body)
        self._wait(operation, zone, what, timeout_s)

    def _wait(self, operation: Json, zone: str, what: str, timeout_s: float) -> None:
        where = self._zone(zone, "operations", operation["name"], "wait")
        self._wait_done(operation, lambda: self._wait_call(f"wait for {what}", where), what, timeout_s)
