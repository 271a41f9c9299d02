"""The simulated project's Compute Engine VMs (the cluster's controller VM, issue 36): zones,
machine types, and instances inserted, read, listed by label and deleted, over the same
`ComputeState` as the network (`sim/compute.py`), in the caller's hold of the simulated cloud.

Zones: the simulated ones, and a few of Google's (those of the Cloud TPU regions, so a dry run of
a spec written for Google Cloud finds its controller a zone as it would there). `sim-zone-a` and
`-b` and every Google zone listed offer the same general-purpose machine types (e2, n2, n1: a
simplification; each zone's real list is longer); `sim-zone-c` and `us-central2-b` offer TPUs
only: us-central2 is a Cloud TPU region (https://cloud.google.com/tpu/docs/regions-zones) that
Compute Engine's list of regions and their machine types
(https://cloud.google.com/compute/docs/regions-zones) does not name, so the stricter answer is
that it offers none, and a controller's zone is chosen past it. An instance is PROVISIONING for its cluster's
create latency (its insert operation is RUNNING), then RUNNING; a deleted one is STOPPING for its
delete latency, then gone (`simulation.instance_*_latency_s`; the rulebook's figures by default). A stopped one is TERMINATED, a
suspended one SUSPENDED, until started (resumed) again: which calls each state allows is the
rulebook's (`rulebook.instance_may`); a delete is allowed in any. Changed in place as Google
allows (the rulebook's rules): reset (RUNNING; its VM boots again), setMachineType (TERMINATED),
setMetadata (with the current fingerprint), and its boot disk (named after it) resized larger.
Errors have the API's wording and kind: an unknown zone and a machine type the zone lacks are
400s in an insert; a machine type the zone lacks is a 404 of its own get.
"""

from __future__ import annotations

import ipaddress

from podmanager.cloud import errors as cloud_errors
from podmanager.cloud.base import CLUSTER_LABEL
from podmanager.cloud.instances import Instance
from podmanager.cloud.network import region_of
from podmanager.core.spec import SIMULATED_ZONES
from podmanager.emulator import rulebook
from podmanager.emulator.rulebook import TERMINATED
from podmanager.emulator.sim.compute import SimCompute
from podmanager.emulator.sim.records import ComputeOperation, InstanceRecord

# name -> (vCPUs, memory in MB), as Compute Engine lists them
_GENERAL_PURPOSE = {
    **{f"e2-standard-{n}": (n, n * 4096) for n in (2, 4, 8, 16, 32)},
    **{f"e2-highmem-{n}": (n, n * 8192) for n in (2, 4, 8, 16)},
    **{f"n2-standard-{n}": (n, n * 4096) for n in (2, 4, 8, 16, 32)},
    **{f"n2-highmem-{n}": (n, n * 8192) for n in (2, 4, 8, 16)},
    **{f"n1-standard-{n}": (n, n * 3840) for n in (1, 2, 4, 8, 16)},
}
# Google's zones the simulated project has besides its own: region -> zone letters.
_GOOGLE_ZONES = {
    "us-central1": "abcf", "us-east1": "bcd", "us-east4": "abc", "us-east5": "abc", "us-west1": "abc",
    "us-west4": "abc", "europe-west4": "abc", "asia-east1": "abc", "asia-northeast1": "abc",
}
TPU_ONLY_ZONES = [SIMULATED_ZONES[2], "us-central2-b"]
MACHINE_TYPES: dict[str, dict[str, tuple[int, int]]] = {
    **{zone: _GENERAL_PURPOSE for zone in SIMULATED_ZONES if zone not in TPU_ONLY_ZONES},
    **{f"{region}-{letter}": _GENERAL_PURPOSE for region, letters in _GOOGLE_ZONES.items() for letter in letters},
    **{zone: {} for zone in TPU_ONLY_ZONES},
}
MIN_DISK_GB = 10
# The simulated VM runs on this machine: what reaches it from "outside" is loopback.
EXTERNAL_ADDRESS = "127.0.0.1"


class SimInstances:
    """The VMs of `compute`'s project; what is due (a VM up, a deleted VM gone) is applied first."""

    def __init__(self, compute: SimCompute):
        self.compute = compute
        self.state = compute.state
        self.project = compute.project
        self._advance()

    def _advance(self) -> None:
        gone = [key for key, record in self.state.instances.items()
                if record.gone_at is not None and record.gone_at <= self.compute.now]
        for key in gone:
            del self.state.instances[key]
        if gone:
            self.compute.changed = True

    # ------------------------------------------------------------------ zones and machine types

    def zones(self) -> list[str]:
        return list(MACHINE_TYPES)

    def zone(self, zone: str) -> str:
        if zone not in MACHINE_TYPES:
            raise cloud_errors.NotFoundError(f"The resource 'projects/{self.project}/zones/{zone}' was not found")
        return zone

    def machine_type(self, zone: str, name: str) -> tuple[int, int]:
        """(vCPUs, memory in MB) of a machine type the zone offers."""
        self._known_zone(zone)
        found = MACHINE_TYPES[zone].get(name)
        if found is None:
            raise cloud_errors.NotFoundError(
                f"The resource 'projects/{self.project}/zones/{zone}/machineTypes/{name}' was not found")
        return found

    def _known_zone(self, zone: str) -> None:
        if zone not in MACHINE_TYPES:
            raise cloud_errors.InvalidRequestError(f"Invalid value for field 'zone': '{zone}'. Unknown zone.")

    # ------------------------------------------------------------------ instances

    def instance(self, zone: str, name: str) -> Instance:
        self._known_zone(zone)
        record = self.state.instances.get(f"{zone}/{name}")
        if record is None:
            raise cloud_errors.NotFoundError(
                f"The resource 'projects/{self.project}/zones/{zone}/instances/{name}' was not found")
        return self._as_reported(record)

    def instances(self, zone: str | None, labels: dict[str, str]) -> list[Instance]:
        """The VMs of `zone` (None: every zone) that carry all of `labels`."""
        if zone is not None:
            self._known_zone(zone)
        return [self._as_reported(record) for record in self.state.instances.values()
                if (zone is None or record.instance.zone == zone)
                and all(record.instance.labels.get(key) == value for key, value in labels.items())]

    def _as_reported(self, record: InstanceRecord) -> Instance:
        status = ("STOPPING" if record.gone_at is not None else record.halted
                  or ("RUNNING" if self.compute.now >= record.running_at else "PROVISIONING"))
        return record.instance.model_copy(update={
            "status": status, "disk": record.instance.disk or record.instance.name,
            "metadata_fingerprint": rulebook.metadata_fingerprint(record.instance.metadata)})

    def insert(self, asked: Instance) -> ComputeOperation:
        zone, name = asked.zone, asked.name
        self._known_zone(zone)
        if asked.machine_type not in MACHINE_TYPES[zone]:
            raise cloud_errors.InvalidRequestError(
                f"Invalid value for field 'resource.machineType': 'zones/{zone}/machineTypes/{asked.machine_type}'. "
                f"Machine type with name '{asked.machine_type}' does not exist in zone '{zone}'.")
        if f"{zone}/{name}" in self.state.instances:
            raise cloud_errors.AlreadyExistsError(
                f"The resource 'projects/{self.project}/zones/{zone}/instances/{name}' already exists")
        if asked.disk_gb < MIN_DISK_GB:
            raise cloud_errors.InvalidRequestError(
                f"Invalid value for field 'resource.disks[0].initializeParams.diskSizeGb': '{asked.disk_gb}'. "
                f"Requested disk size cannot be smaller than the image size ({MIN_DISK_GB} GB).")
        network = self.compute.network(asked.network)
        subnetwork_name = asked.subnetwork or (network.name if network.auto_create_subnetworks else "")
        if not subnetwork_name:
            raise cloud_errors.InvalidRequestError(
                "Invalid value for field 'resource.networkInterfaces[0].subnetwork': ''. Subnetwork should be "
                f"specified for custom subnetmode network '{network.name}'.")
        subnetwork = self.compute.subnetwork(region_of(zone), subnetwork_name)
        hosts = ipaddress.ip_network(subnetwork.ip_cidr_range).hosts()
        taken = {record.instance.internal_ip for record in self.state.instances.values()}
        internal_ip = next(str(ip) for at, ip in enumerate(hosts) if at >= 1 and str(ip) not in taken)  # .1: the gateway
        made = asked.model_copy(update={
            "subnetwork": subnetwork.name, "internal_ip": internal_ip, "status": "",
            "external_address": EXTERNAL_ADDRESS if asked.external_ip else ""})
        create_s, _ = self._latency(made)
        self.state.instances[f"{zone}/{name}"] = InstanceRecord(instance=made, running_at=self.compute.now + create_s)
        return self.compute.start_operation("insert", f"zones/{zone}/instances/{name}", zone=zone,
                                            latency_s=create_s)

    def _latency(self, instance: Instance) -> tuple[float, float]:
        """(create, delete) seconds of the instance, by its cluster's simulation."""
        return self.compute.instance_latency(instance.labels.get(CLUSTER_LABEL, ""))

    def next_change(self) -> float | None:
        """The simulated time at which an instance next turns RUNNING or goes; None: nothing pending."""
        moments = [when for record in self.state.instances.values() for when in (record.running_at, record.gone_at)
                   if when is not None and when > self.compute.now]
        return min(moments, default=None)

    # ------------------------------------------------------------------ guest attributes

    def set_guest_attribute(self, zone: str, name: str, path: str, value: str) -> None:
        """What the VM's `PUT .../guest-attributes/NAMESPACE/KEY` stores (`path` is NAMESPACE/KEY)."""
        namespace, _, key = path.strip("/").partition("/")
        if not namespace or not key or "/" in key:
            raise cloud_errors.InvalidRequestError(f"guest attribute path {path!r} is not NAMESPACE/KEY")
        self.instance(zone, name)
        self.state.instances[f"{zone}/{name}"].guest_attributes[f"{namespace}/{key}"] = value
        self.compute.changed = True

    def guest_attributes(self, zone: str, name: str, query_path: str) -> list[tuple[str, str, str]]:
        """(namespace, key, value) of the VM's guest attributes under `query_path` ("NS/" or "NS":
        a namespace, "NS/KEY": one key, "" or "/": all), in path order. The API answers 404 when
        none is there yet, as Compute Engine does."""
        self.instance(zone, name)
        wanted_namespace, _, wanted_key = query_path.strip("/").partition("/")
        found = []
        for path, value in sorted(self.state.instances[f"{zone}/{name}"].guest_attributes.items()):
            namespace, key = path.split("/", 1)
            if (not wanted_namespace or namespace == wanted_namespace) and (not wanted_key or key == wanted_key):
                found.append((namespace, key, value))
        if not found:
            raise cloud_errors.NotFoundError(f"The resource 'projects/{self.project}/zones/{zone}/instances/{name}"
                                             f"/guestAttributes/{query_path}' was not found")
        return found

    # ------------------------------------------------------------------ stopped, suspended, started

    def halt(self, zone: str, name: str, state: str) -> ComputeOperation:
        """The instance stopped (TERMINATED) or SUSPENDED: by instances.stop or .suspend, or by
        Compute Engine itself (a host error, a preemption; the `sim controller-stop` fault)."""
        self.instance(zone, name)
        record = self.state.instances[f"{zone}/{name}"]
        rulebook.instance_may(record.instance.name, self._as_reported(record).status,
                              "stop" if state == TERMINATED else "suspend")
        record.halted = state
        self.compute.changed = True
        return self.compute.start_operation("stop" if state == TERMINATED else "suspend",
                                            f"zones/{zone}/instances/{name}", zone=zone,
                                            latency_s=self._latency(record.instance)[1])

    def start(self, zone: str, name: str, verb: str) -> ComputeOperation:
        """instances.start of a TERMINATED instance, or .resume (`verb`) of a SUSPENDED one: it boots
        again (a start runs its startup script again, on the same disk)."""
        self.instance(zone, name)
        record = self.state.instances[f"{zone}/{name}"]
        rulebook.instance_may(record.instance.name, self._as_reported(record).status, verb)
        record.halted = ""
        create_s, _ = self._latency(record.instance)
        record.running_at = self.compute.now + create_s
        self.compute.changed = True
        return self.compute.start_operation(verb, f"zones/{zone}/instances/{name}", zone=zone, latency_s=create_s)

    def reset(self, zone: str, name: str) -> ComputeOperation:
        """instances.reset: the instance stays RUNNING on its disks and boots again (its startup
        script runs again); its VM is killed and booted again by `instance_vms.py`. The operation
        takes a boot's time (the instance's create latency)."""
        record = self._record(zone, name)
        rulebook.instance_may(name, self._as_reported(record).status, "reset")
        record.resets += 1
        self.compute.changed = True
        return self.compute.start_operation("reset", f"zones/{zone}/instances/{name}", zone=zone,
                                            latency_s=self._latency(record.instance)[0])

    def set_machine_type(self, zone: str, name: str, machine_type: str) -> ComputeOperation:
        """instances.setMachineType of a stopped (TERMINATED) instance, to a type its zone offers."""
        record = self._record(zone, name)
        rulebook.instance_may(name, self._as_reported(record).status, "setMachineType")
        if machine_type not in MACHINE_TYPES[zone]:
            raise cloud_errors.InvalidRequestError(
                f"Invalid value for field 'machineType': 'zones/{zone}/machineTypes/{machine_type}'. "
                f"Machine type with name '{machine_type}' does not exist in zone '{zone}'.")
        record.instance = record.instance.model_copy(update={"machine_type": machine_type})
        self.compute.changed = True
        return self.compute.start_operation("setMachineType", f"zones/{zone}/instances/{name}", zone=zone)

    def set_metadata(self, zone: str, name: str, fingerprint: str, items: dict[str, str]) -> ComputeOperation:
        """instances.setMetadata: the metadata replaced whole, given its current fingerprint (412 else)."""
        record = self._record(zone, name)
        rulebook.metadata_may_change(name, record.instance.metadata, fingerprint)
        record.instance = record.instance.model_copy(update={"metadata": dict(items)})
        self.compute.changed = True
        return self.compute.start_operation("setMetadata", f"zones/{zone}/instances/{name}", zone=zone)

    def resize_disk(self, zone: str, disk: str, size_gb: int) -> ComputeOperation:
        """disks.resize of an instance's boot disk (named as `Instance.disk` reports it): larger only."""
        self._known_zone(zone)
        found = [r for r in self.state.instances.values()
                 if r.instance.zone == zone and (r.instance.disk or r.instance.name) == disk]
        if not found:
            raise cloud_errors.NotFoundError(f"The resource 'projects/{self.project}/zones/{zone}/disks/{disk}' was "
                                             "not found")
        record = found[0]
        rulebook.disk_may_grow(disk, record.instance.disk_gb, size_gb)
        record.instance = record.instance.model_copy(update={"disk_gb": size_gb})
        self.compute.changed = True
        return self.compute.start_operation("resize", f"zones/{zone}/disks/{disk}", zone=zone)

    def _record(self, zone: str, name: str) -> InstanceRecord:
        self.instance(zone, name)  # 400 for an unknown zone, 404 for no such instance
        return self.state.instances[f"{zone}/{name}"]

    def delete(self, zone: str, name: str) -> ComputeOperation:
        self.instance(zone, name)
        record = self.state.instances[f"{zone}/{name}"]
        delete_s = self._latency(record.instance)[1]
        if record.gone_at is None:
            record.gone_at = self.compute.now + delete_s
        self.compute.changed = True
        return self.compute.start_operation("delete", f"zones/{zone}/instances/{name}", zone=zone,
                                            latency_s=delete_s)
