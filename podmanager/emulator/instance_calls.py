"""Compute Engine's zone, machine-type and instance calls on the simulated project
(`sim/instances.py`), in the client library's own types: each takes the request
(`compute_calls.Call`), logs it and answers the message the API would (`compute_api.py` routes
to them)."""

from __future__ import annotations

import json
from typing import Any, Callable

from google.cloud import compute_v1

from podmanager.cloud import errors as cloud_errors
from podmanager.cloud.instances import Instance
from podmanager.cloud.network import short_name
from podmanager.emulator import rulebook
from podmanager.emulator.compute_calls import ROOT, Call, operation_message
from podmanager.emulator.list_filter import UnsupportedFilter
from podmanager.emulator.sim.instances import SimInstances


def _zone_url(call: Call, zone: str) -> str:
    return f"{ROOT}/projects/{call.name}/zones/{zone}"


def _network_project(url: str) -> str:
    """P of projects/P/global/networks/N (or of its full URL); "" for a bare or relative name."""
    parts = url.split("/")
    return parts[parts.index("projects") + 1] if "projects" in parts else ""


def _instance_record(call: Call, message: compute_v1.Instance) -> Instance:
    """The instance an insert asks for."""
    nic = message.network_interfaces[0] if message.network_interfaces else compute_v1.NetworkInterface()
    account = message.service_accounts[0] if message.service_accounts else compute_v1.ServiceAccount()
    disk = message.disks[0].initialize_params if message.disks else compute_v1.AttachedDiskInitializeParams()
    return Instance(
        name=message.name, zone=call.zone, machine_type=short_name(message.machine_type),
        labels=dict(message.labels), network=short_name(nic.network or "default"),
        subnetwork=short_name(nic.subnetwork) if nic.subnetwork else "",
        network_project=_network_project(nic.network), external_ip=bool(nic.access_configs),
        service_account=account.email, scopes=list(account.scopes),
        metadata={item.key: item.value for item in message.metadata.items}, tags=list(message.tags.items),
        disk_gb=disk.disk_size_gb if "disk_size_gb" in disk else 10, image=disk.source_image)


def instance_message(call: Call, instance: Instance) -> compute_v1.Instance:
    """The instance as the API reports it."""
    zone = _zone_url(call, instance.zone)
    network_project = instance.network_project or call.name
    region = zone.rsplit("/zones/", 1)[0] + "/regions/" + instance.zone.rsplit("-", 1)[0]
    access = [compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT", nat_i_p=instance.external_address)
              ] if instance.external_ip else []
    return compute_v1.Instance(
        name=instance.name, zone=zone, machine_type=f"{zone}/machineTypes/{instance.machine_type}",
        status=instance.status, labels=instance.labels, self_link=f"{zone}/instances/{instance.name}",
        network_interfaces=[compute_v1.NetworkInterface(
            name="nic0", network=f"{ROOT}/projects/{network_project}/global/networks/{instance.network}",
            subnetwork=f"{region}/subnetworks/{instance.subnetwork}", network_i_p=instance.internal_ip,
            access_configs=access)],
        service_accounts=[compute_v1.ServiceAccount(email=instance.service_account, scopes=instance.scopes)],
        metadata=compute_v1.Metadata(items=[compute_v1.Items(key=k, value=v) for k, v in instance.metadata.items()]),
        tags=compute_v1.Tags(items=instance.tags),
        disks=[compute_v1.AttachedDisk(boot=True, auto_delete=True, disk_size_gb=instance.disk_gb,
                                       source=f"{zone}/disks/{instance.name}")])


# ---------------------------------------------------------------------- the calls


def _list_zones(call: Call) -> Any:
    call.log("compute.zones.list", compute_v1.ListZonesRequest(project=call.name))
    return compute_v1.ZoneList(items=[_zone(call, zone) for zone in SimInstances(call.project).zones()])


def _get_zone(call: Call) -> Any:
    call.log("compute.zones.get", compute_v1.GetZoneRequest(project=call.name, zone=call.resource))
    return _zone(call, SimInstances(call.project).zone(call.resource))


def _zone(call: Call, zone: str) -> compute_v1.Zone:
    return compute_v1.Zone(name=zone, status="UP", self_link=_zone_url(call, zone),
                           region=f"{ROOT}/projects/{call.name}/regions/{zone.rsplit('-', 1)[0]}")


def _get_machine_type(call: Call) -> Any:
    call.log("compute.machineTypes.get", compute_v1.GetMachineTypeRequest(
        project=call.name, zone=call.zone, machine_type=call.resource))
    cpus, memory_mb = SimInstances(call.project).machine_type(call.zone, call.resource)
    return compute_v1.MachineType(name=call.resource, guest_cpus=cpus, memory_mb=memory_mb,
                                  zone=call.zone, self_link=f"{_zone_url(call, call.zone)}/machineTypes/{call.resource}")


def _insert_instance(call: Call) -> Any:
    asked = compute_v1.Instance.from_json(json.dumps(call.body), ignore_unknown_fields=True)
    call.log("compute.instances.insert", compute_v1.InsertInstanceRequest(
        project=call.name, zone=call.zone, instance_resource=asked))
    return operation_message(call, SimInstances(call.project).insert(_instance_record(call, asked)))


def _get_instance(call: Call) -> Any:
    call.log("compute.instances.get", compute_v1.GetInstanceRequest(
        project=call.name, zone=call.zone, instance=call.resource))
    return instance_message(call, SimInstances(call.project).instance(call.zone, call.resource))


def _fields(instance: Instance) -> Callable[[str], str | None]:
    """An instance's fields as a list filter names them (`labels.KEY`, `name`, `status`)."""
    def lookup(field: str) -> str | None:
        if field.startswith("labels."):
            return instance.labels.get(field[len("labels."):])
        if field in ("name", "status"):
            return getattr(instance, field)
        raise UnsupportedFilter(f"the emulator filters instances on name, status and labels only, not {field!r}")
    return lookup


def _filtered(call: Call, zone: str | None, asked: str) -> list[Instance]:
    wanted = rulebook.compute_list_filter(asked)
    try:
        return [i for i in SimInstances(call.project).instances(zone, {}) if wanted.matches(_fields(i))]
    except UnsupportedFilter as limit:
        raise cloud_errors.InvalidRequestError(f"Invalid value for field 'filter': '{asked}'. {limit}.") from limit


def _list_instances(call: Call) -> Any:
    """One zone's (instances.list) or every zone's (instances.aggregatedList), by the path."""
    asked = call.query.get("filter", [""])[0]
    if call.zone:
        call.log("compute.instances.list", compute_v1.ListInstancesRequest(project=call.name, zone=call.zone,
                                                                         filter=asked))
        return compute_v1.InstanceList(items=[instance_message(call, i) for i in _filtered(call, call.zone, asked)])
    call.log("compute.instances.aggregatedList", compute_v1.AggregatedListInstancesRequest(project=call.name,
                                                                                          filter=asked))
    by_zone: dict[str, list[compute_v1.Instance]] = {}
    for instance in _filtered(call, None, asked):
        by_zone.setdefault(f"zones/{instance.zone}", []).append(instance_message(call, instance))
    return compute_v1.InstanceAggregatedList(
        items={zone: compute_v1.InstancesScopedList(instances=found) for zone, found in by_zone.items()})


def _delete_instance(call: Call) -> Any:
    call.log("compute.instances.delete", compute_v1.DeleteInstanceRequest(
        project=call.name, zone=call.zone, instance=call.resource))
    return operation_message(call, SimInstances(call.project).delete(call.zone, call.resource))


def _halt_instance(verb: str, request: Any, state: str) -> Callable[[Call], Any]:
    def halt(call: Call) -> Any:
        call.log(f"compute.instances.{verb}", request(project=call.name, zone=call.zone, instance=call.resource))
        return operation_message(call, SimInstances(call.project).halt(call.zone, call.resource, state))
    return halt


def _start_instance(verb: str, request: Any) -> Callable[[Call], Any]:
    def start(call: Call) -> Any:
        call.log(f"compute.instances.{verb}", request(project=call.name, zone=call.zone, instance=call.resource))
        return operation_message(call, SimInstances(call.project).start(call.zone, call.resource, verb))
    return start


def _get_guest_attributes(call: Call) -> Any:
    """instances.getGuestAttributes: what the VM PUT on its metadata server under `queryPath`."""
    query_path = call.query.get("queryPath", [""])[0]
    call.log("compute.instances.getGuestAttributes", compute_v1.GetGuestAttributesInstanceRequest(
        project=call.name, zone=call.zone, instance=call.resource, query_path=query_path))
    found = SimInstances(call.project).guest_attributes(call.zone, call.resource, query_path)
    return compute_v1.GuestAttributes(
        query_path=query_path, self_link=f"{_zone_url(call, call.zone)}/instances/{call.resource}/guestAttributes",
        query_value=compute_v1.GuestAttributesValue(items=[
            compute_v1.GuestAttributesEntry(namespace=namespace, key=key, value=value) for namespace, key, value in found]))


# (HTTP method, collection, names one resource, verb) -> the call
ROUTES: dict[tuple[str, str, bool, str | None], Callable[[Call], Any]] = {
    ("GET", "zones", False, None): _list_zones,
    ("GET", "zones", True, None): _get_zone,
    ("GET", "machineTypes", True, None): _get_machine_type,
    ("POST", "instances", False, None): _insert_instance,
    ("GET", "instances", True, None): _get_instance,
    ("GET", "instances", False, None): _list_instances,
    ("DELETE", "instances", True, None): _delete_instance,
    ("GET", "instances", True, "getGuestAttributes"): _get_guest_attributes,
    ("POST", "instances", True, "stop"): _halt_instance("stop", compute_v1.StopInstanceRequest, rulebook.TERMINATED),
    ("POST", "instances", True, "suspend"): _halt_instance("suspend", compute_v1.SuspendInstanceRequest,
                                                           rulebook.SUSPENDED),
    ("POST", "instances", True, "start"): _start_instance("start", compute_v1.StartInstanceRequest),
    ("POST", "instances", True, "resume"): _start_instance("resume", compute_v1.ResumeInstanceRequest),
}
