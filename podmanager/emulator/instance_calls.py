"""Compute Engine's zone, machine-type and instance calls on the simulated project
(`sim/instances.py`), in the API's JSON: each takes the request (`compute_calls.Call`), logs it
and answers the resource the API would (`compute_api.py` routes to them)."""

from __future__ import annotations

from typing import Callable

from podmanager.cloud import errors as cloud_errors
from podmanager.cloud.instances import Instance
from podmanager.cloud.network import short_name
from podmanager.emulator import rulebook
from podmanager.emulator.compute_calls import (
    ROOT,
    Call,
    Json,
    operation_message,
    resource_list,
    without_empty,
)
from podmanager.emulator.list_filter import UnsupportedFilter
from podmanager.emulator.sim.instances import SimInstances


def _zone_url(call: Call, zone: str) -> str:
    return f"{ROOT}/projects/{call.name}/zones/{zone}"


def _network_project(url: str) -> str:
    """P of projects/P/global/networks/N (or of its full URL); "" for a bare or relative name."""
    parts = url.split("/")
    return parts[parts.index("projects") + 1] if "projects" in parts else ""


def _instance_record(call: Call, body: Json) -> Instance:
    """The instance an insert asks for."""
    nic = (body.get("networkInterfaces") or [{}])[0]
    account = (body.get("serviceAccounts") or [{}])[0]
    disk = (body.get("disks") or [{}])[0].get("initializeParams", {})
    return Instance(
        name=body.get("name", ""), zone=call.zone, machine_type=short_name(body.get("machineType", "")),
        labels=body.get("labels", {}), network=short_name(nic.get("network") or "default"),
        subnetwork=short_name(nic["subnetwork"]) if nic.get("subnetwork") else "",
        network_project=_network_project(nic.get("network", "")), external_ip=bool(nic.get("accessConfigs")),
        service_account=account.get("email", ""), scopes=account.get("scopes", []),
        metadata={item.get("key", ""): item.get("value", "") for item in body.get("metadata", {}).get("items", [])},
        tags=body.get("tags", {}).get("items", []),
        # An int64 comes as a string or a number (https://protobuf.dev/programming-guides/json/).
        disk_gb=int(disk["diskSizeGb"]) if "diskSizeGb" in disk else 10, image=disk.get("sourceImage", ""))


def instance_message(call: Call, instance: Instance) -> Json:
    """The instance as the API reports it."""
    zone = _zone_url(call, instance.zone)
    network_project = instance.network_project or call.name
    region = zone.rsplit("/zones/", 1)[0] + "/regions/" + instance.zone.rsplit("-", 1)[0]
    access = [without_empty({"kind": "compute#accessConfig", "name": "External NAT", "type": "ONE_TO_ONE_NAT",
                             "natIP": instance.external_address})] if instance.external_ip else []
    return without_empty({
        "kind": "compute#instance", "name": instance.name, "zone": zone,
        "machineType": f"{zone}/machineTypes/{instance.machine_type}", "status": instance.status,
        "labels": instance.labels, "selfLink": f"{zone}/instances/{instance.name}",
        "networkInterfaces": [without_empty({
            "kind": "compute#networkInterface", "name": "nic0",
            "network": f"{ROOT}/projects/{network_project}/global/networks/{instance.network}",
            "subnetwork": f"{region}/subnetworks/{instance.subnetwork}", "networkIP": instance.internal_ip,
            "accessConfigs": access})],
        "serviceAccounts": [{"email": instance.service_account, "scopes": instance.scopes}],
        "metadata": without_empty({"kind": "compute#metadata", "fingerprint": instance.metadata_fingerprint,
                                   "items": [{"key": k, "value": v} for k, v in instance.metadata.items()]}),
        "tags": without_empty({"items": instance.tags}),
        # diskSizeGb is an int64: a string in JSON.
        "disks": [{"kind": "compute#attachedDisk", "boot": True, "autoDelete": True,
                   "diskSizeGb": str(instance.disk_gb), "source": f"{zone}/disks/{instance.disk or instance.name}"}]})


# ---------------------------------------------------------------------- the calls


def _list_zones(call: Call) -> Json:
    call.log("compute.zones.list", call.request())
    return resource_list("zoneList", [_zone(call, zone) for zone in SimInstances(call.project).zones()])


def _get_zone(call: Call) -> Json:
    call.log("compute.zones.get", call.request(zone=call.resource))
    return _zone(call, SimInstances(call.project).zone(call.resource))


def _zone(call: Call, zone: str) -> Json:
    return {"kind": "compute#zone", "name": zone, "status": "UP", "selfLink": _zone_url(call, zone),
            "region": f"{ROOT}/projects/{call.name}/regions/{zone.rsplit('-', 1)[0]}"}


def _get_machine_type(call: Call) -> Json:
    call.log("compute.machineTypes.get", call.request(zone=call.zone, machineType=call.resource))
    cpus, memory_mb = SimInstances(call.project).machine_type(call.zone, call.resource)
    return {"kind": "compute#machineType", "name": call.resource, "guestCpus": cpus, "memoryMb": memory_mb,
            "zone": call.zone, "selfLink": f"{_zone_url(call, call.zone)}/machineTypes/{call.resource}"}


def _insert_instance(call: Call) -> Json:
    call.log("compute.instances.insert", call.request(zone=call.zone))
    return operation_message(call, SimInstances(call.project).insert(_instance_record(call, call.body)))


def _get_instance(call: Call) -> Json:
    call.log("compute.instances.get", call.request(zone=call.zone, instance=call.resource))
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


def _list_instances(call: Call) -> Json:
    """One zone's (instances.list) or every zone's (instances.aggregatedList), by the path."""
    asked = call.query.get("filter", [""])[0]
    if call.zone:
        call.log("compute.instances.list", call.request(zone=call.zone, filter=asked))
        return resource_list("instanceList", [instance_message(call, i) for i in _filtered(call, call.zone, asked)])
    call.log("compute.instances.aggregatedList", call.request(filter=asked))
    by_zone: dict[str, list[Json]] = {}
    for instance in _filtered(call, None, asked):
        by_zone.setdefault(f"zones/{instance.zone}", []).append(instance_message(call, instance))
    return resource_list("instanceAggregatedList", {zone: {"instances": found} for zone, found in by_zone.items()})


def _delete_instance(call: Call) -> Json:
    call.log("compute.instances.delete", call.request(zone=call.zone, instance=call.resource))
    return operation_message(call, SimInstances(call.project).delete(call.zone, call.resource))


def _halt_instance(verb: str, state: str) -> Callable[[Call], Json]:
    def halt(call: Call) -> Json:
        call.log(f"compute.instances.{verb}", call.request(zone=call.zone, instance=call.resource))
        return operation_message(call, SimInstances(call.project).halt(call.zone, call.resource, state))
    return halt


def _start_instance(verb: str) -> Callable[[Call], Json]:
    def start(call: Call) -> Json:
        call.log(f"compute.instances.{verb}", call.request(zone=call.zone, instance=call.resource))
        return operation_message(call, SimInstances(call.project).start(call.zone, call.resource, verb))
    return start


def _reset_instance(call: Call) -> Json:
    call.log("compute.instances.reset", call.request(zone=call.zone, instance=call.resource))
    return operation_message(call, SimInstances(call.project).reset(call.zone, call.resource))


def _set_machine_type(call: Call) -> Json:
    call.log("compute.instances.setMachineType", call.request(zone=call.zone, instance=call.resource))
    asked = short_name(call.body.get("machineType", ""))
    return operation_message(call, SimInstances(call.project).set_machine_type(call.zone, call.resource, asked))


def _set_metadata(call: Call) -> Json:
    call.log("compute.instances.setMetadata", call.request(zone=call.zone, instance=call.resource))
    items = {item.get("key", ""): item.get("value", "") for item in call.body.get("items", [])}
    return operation_message(call, SimInstances(call.project).set_metadata(
        call.zone, call.resource, call.body.get("fingerprint", ""), items))


def _resize_disk(call: Call) -> Json:
    call.log("compute.disks.resize", call.request(zone=call.zone, disk=call.resource))
    # sizeGb is an int64: a string or a number in JSON.
    return operation_message(call, SimInstances(call.project).resize_disk(call.zone, call.resource,
                                                                          int(call.body.get("sizeGb", 0))))


def _get_guest_attributes(call: Call) -> Json:
    """instances.getGuestAttributes: what the VM PUT on its metadata server under `queryPath`."""
    query_path = call.query.get("queryPath", [""])[0]
    call.log("compute.instances.getGuestAttributes", call.request(zone=call.zone, instance=call.resource,
                                                                  queryPath=query_path))
    found = SimInstances(call.project).guest_attributes(call.zone, call.resource, query_path)
    return {"kind": "compute#guestAttributes", "queryPath": query_path,
            "selfLink": f"{_zone_url(call, call.zone)}/instances/{call.resource}/guestAttributes",
            "queryValue": without_empty({"items": [{"namespace": namespace, "key": key, "value": value}
                                                   for namespace, key, value in found]})}


# (HTTP method, collection, names one resource, verb) -> the call
ROUTES: dict[tuple[str, str, bool, str | None], Callable[[Call], Json]] = {
    ("GET", "zones", False, None): _list_zones,
    ("GET", "zones", True, None): _get_zone,
    ("GET", "machineTypes", True, None): _get_machine_type,
    ("POST", "instances", False, None): _insert_instance,
    ("GET", "instances", True, None): _get_instance,
    ("GET", "instances", False, None): _list_instances,
    ("DELETE", "instances", True, None): _delete_instance,
    ("GET", "instances", True, "getGuestAttributes"): _get_guest_attributes,
    ("POST", "instances", True, "stop"): _halt_instance("stop", rulebook.TERMINATED),
    ("POST", "instances", True, "suspend"): _halt_instance("suspend", rulebook.SUSPENDED),
    ("POST", "instances", True, "start"): _start_instance("start"),
    ("POST", "instances", True, "resume"): _start_instance("resume"),
    ("POST", "instances", True, "reset"): _reset_instance,
    ("POST", "instances", True, "setMachineType"): _set_machine_type,
    ("POST", "instances", True, "setMetadata"): _set_metadata,
    ("POST", "disks", True, "resize"): _resize_disk,
}
