"""Compute Engine's calls on the simulated project, in the API's JSON (its discovery document's
names, https://cloud.google.com/compute/docs/reference/rest/v1): each takes the request
(`Call`), logs it and answers the resource the API would (`compute_api.py` routes to them)."""

from __future__ import annotations

from typing import Any, Callable

from podmanager.cloud.network import (
    Allowed,
    FirewallRule,
    Nat,
    Network,
    Router,
    Subnetwork,
    short_name,
)
from podmanager.emulator.sim.cloud import SIMULATED_PROJECT_NUMBER
from podmanager.emulator.sim.compute import SimCompute
from podmanager.emulator.sim.records import ComputeOperation

ROOT = "https://www.googleapis.com/compute/v1"
Json = dict[str, Any]
Log = Callable[[str, Json], None]  # (method, the request as `Call.request` gives it): the emulator's request log


class Call:
    """One request: the project's records, the path's parts, the query and the body."""

    def __init__(self, project: SimCompute, log: Log, where: dict[str, str | None], body: Json,
                 query: dict[str, list[str]] | None = None):
        self.project, self.log, self.body = project, log, body
        self.name = where["project"] or project.project  # as the caller named it: any project is served
        self.region = where["region"] or ""
        self.zone = where["zone"] or ""
        self.resource = where["name"] or ""
        self.query = query or {}

    def request(self, **names: str) -> Json:
        """The request as the log keeps it: the method's parameters (`names`, and the project) by
        their names in the discovery document (`zone`, `firewall`, `filter`, ...) and the body it carried."""
        asked: Json = {"project": self.name, **names}
        if self.body:
            asked["body"] = self.body
        return asked

    def network_url(self, name: str) -> str:
        return f"{ROOT}/projects/{self.name}/global/networks/{name}"


def without_empty(resource: Json) -> Json:
    """`resource` without its empty lists and maps, as Google writes JSON (a field unset is left out)."""
    return {key: value for key, value in resource.items() if value not in ([], {})}


# ---------------------------------------------------------------------- records as the API's resources


def _network(call: Call, network: Network) -> Json:
    return {"kind": "compute#network", "name": network.name, "autoCreateSubnetworks": network.auto_create_subnetworks,
            "selfLink": call.network_url(network.name)}


def _subnetwork(call: Call, subnetwork: Subnetwork) -> Json:
    region = f"{ROOT}/projects/{call.name}/regions/{subnetwork.region}"
    return {"kind": "compute#subnetwork", "name": subnetwork.name, "region": region,
            "network": call.network_url(subnetwork.network), "ipCidrRange": subnetwork.ip_cidr_range,
            "privateIpGoogleAccess": subnetwork.private_ip_google_access,
            "selfLink": f"{region}/subnetworks/{subnetwork.name}"}


def _protocols(allowed: list[Allowed]) -> list[Json]:
    return [without_empty({"IPProtocol": a.protocol, "ports": a.ports}) for a in allowed]


def _firewall(call: Call, rule: FirewallRule) -> Json:
    return without_empty({
        "kind": "compute#firewall", "name": rule.name, "network": call.network_url(rule.network),
        "direction": rule.direction, "priority": rule.priority, "sourceRanges": rule.source_ranges,
        "sourceTags": rule.source_tags, "targetTags": rule.target_tags, "allowed": _protocols(rule.allowed),
        "denied": _protocols(rule.denied), "destinationRanges": rule.destination_ranges, "disabled": rule.disabled,
        "selfLink": f"{ROOT}/projects/{call.name}/global/firewalls/{rule.name}"})


def _firewall_record(body: Json) -> FirewallRule:
    """The rule an insert asks for (Google's defaults where it says nothing)."""
    return FirewallRule(
        name=body.get("name", ""), network=short_name(body.get("network") or "default"),
        direction=body.get("direction") or "INGRESS", priority=int(body.get("priority", 1000)),
        source_ranges=body.get("sourceRanges", []), source_tags=body.get("sourceTags", []),
        target_tags=body.get("targetTags", []),
        allowed=[Allowed(protocol=a.get("IPProtocol", ""), ports=a.get("ports", [])) for a in body.get("allowed", [])],
        denied=[Allowed(protocol=d.get("IPProtocol", ""), ports=d.get("ports", [])) for d in body.get("denied", [])],
        destination_ranges=body.get("destinationRanges", []), disabled=bool(body.get("disabled", False)))


def _router(call: Call, router: Router) -> Json:
    region = f"{ROOT}/projects/{call.name}/regions/{router.region}"
    nats = [without_empty({"name": nat.name, "sourceSubnetworkIpRangesToNat": nat.source_subnetwork_ip_ranges_to_nat,
                           "subnetworks": [{"name": f"{region}/subnetworks/{s}"} for s in nat.subnetworks]})
            for nat in router.nats]
    return without_empty({"kind": "compute#router", "name": router.name, "region": region,
                          "network": call.network_url(router.network), "nats": nats,
                          "selfLink": f"{region}/routers/{router.name}"})


def _router_record(call: Call, body: Json) -> Router:
    nats = [Nat(name=nat.get("name", ""), source_subnetwork_ip_ranges_to_nat=nat.get("sourceSubnetworkIpRangesToNat", ""),
                subnetworks=[short_name(s.get("name", "")) for s in nat.get("subnetworks", [])])
            for nat in body.get("nats", [])]
    return Router(name=body.get("name", ""), region=call.region, network=short_name(body.get("network", "")), nats=nats)


def resource_list(kind: str, items: list[Json] | dict[str, Json]) -> Json:
    """One page of a list: every item (the emulator's lists fit one page: no `nextPageToken`)."""
    return without_empty({"kind": f"compute#{kind}", "items": items})


def operation_message(call: Call, operation: ComputeOperation) -> Json:
    where = (f"regions/{operation.region}" if operation.region else f"zones/{operation.zone}" if operation.zone
             else "global")
    done = call.project.now >= operation.done_at
    scope = ({"region": f"{ROOT}/projects/{call.name}/regions/{operation.region}"} if operation.region
             else {"zone": f"{ROOT}/projects/{call.name}/zones/{operation.zone}"} if operation.zone else {})
    return {"kind": "compute#operation", "name": operation.name, "operationType": operation.kind,
            "progress": 100 if done else 0, "status": "DONE" if done else "RUNNING",
            "targetLink": f"{ROOT}/projects/{call.name}/{operation.target}",
            "selfLink": f"{ROOT}/projects/{call.name}/{where}/operations/{operation.name}", **scope}


# ---------------------------------------------------------------------- the calls


def get_project(project: str, log: Log) -> Json:
    """The project as `projects.get` answers it: what the VMs run as unless told otherwise."""
    log("compute.projects.get", {"project": project})
    # Project.id is a uint64: a string in JSON (https://protobuf.dev/programming-guides/json/).
    return {"kind": "compute#project", "name": project, "id": SIMULATED_PROJECT_NUMBER,
            "defaultServiceAccount": f"{SIMULATED_PROJECT_NUMBER}-compute@developer.gserviceaccount.com"}


def _get_network(call: Call) -> Json:
    call.log("compute.networks.get", call.request(network=call.resource))
    return _network(call, call.project.network(call.resource))


def _list_networks(call: Call) -> Json:
    call.log("compute.networks.list", call.request())
    return resource_list("networkList", [_network(call, n) for n in call.project.networks()])


def _delete_network(call: Call) -> Json:
    call.log("compute.networks.delete", call.request(network=call.resource))
    return operation_message(call, call.project.delete_network(call.resource))


def _get_subnetwork(call: Call) -> Json:
    call.log("compute.subnetworks.get", call.request(region=call.region, subnetwork=call.resource))
    return _subnetwork(call, call.project.subnetwork(call.region, call.resource))


def _list_subnetworks(call: Call) -> Json:
    call.log("compute.subnetworks.list", call.request(region=call.region))
    return resource_list("subnetworkList", [_subnetwork(call, s) for s in call.project.subnetworks(call.region)])


def _delete_subnetwork(call: Call) -> Json:
    call.log("compute.subnetworks.delete", call.request(region=call.region, subnetwork=call.resource))
    return operation_message(call, call.project.delete_subnetwork(call.region, call.resource))


def _set_private_ip_google_access(call: Call) -> Json:
    call.log("compute.subnetworks.setPrivateIpGoogleAccess", call.request(region=call.region, subnetwork=call.resource))
    return operation_message(call, call.project.set_private_ip_google_access(
        call.region, call.resource, bool(call.body.get("privateIpGoogleAccess", False))))


def _get_firewall(call: Call) -> Json:
    call.log("compute.firewalls.get", call.request(firewall=call.resource))
    return _firewall(call, call.project.firewall(call.resource))


def _list_firewalls(call: Call) -> Json:
    call.log("compute.firewalls.list", call.request())
    return resource_list("firewallList", [_firewall(call, r) for r in call.project.firewalls()])


def _insert_firewall(call: Call) -> Json:
    call.log("compute.firewalls.insert", call.request())
    return operation_message(call, call.project.insert_firewall(_firewall_record(call.body)))


def _patch_firewall(call: Call) -> Json:
    call.log("compute.firewalls.patch", call.request(firewall=call.resource))
    return operation_message(call, call.project.patch_firewall(call.resource, list(call.body.get("sourceRanges", []))))


def _delete_firewall(call: Call) -> Json:
    call.log("compute.firewalls.delete", call.request(firewall=call.resource))
    return operation_message(call, call.project.delete_firewall(call.resource))


def _get_router(call: Call) -> Json:
    call.log("compute.routers.get", call.request(region=call.region, router=call.resource))
    return _router(call, call.project.router(call.region, call.resource))


def _list_routers(call: Call) -> Json:
    call.log("compute.routers.list", call.request(region=call.region))
    return resource_list("routerList", [_router(call, r) for r in call.project.routers(call.region)])


def _insert_router(call: Call) -> Json:
    call.log("compute.routers.insert", call.request(region=call.region))
    return operation_message(call, call.project.insert_router(_router_record(call, call.body)))


def _delete_router(call: Call) -> Json:
    call.log("compute.routers.delete", call.request(region=call.region, router=call.resource))
    return operation_message(call, call.project.delete_router(call.region, call.resource))


def _operation_request(call: Call, verb: str) -> tuple[str, Json]:
    """The logged method and request of an operation's get or wait, by its scope."""
    if call.zone:
        return f"compute.zoneOperations.{verb}", call.request(zone=call.zone, operation=call.resource)
    if call.region:
        return f"compute.regionOperations.{verb}", call.request(region=call.region, operation=call.resource)
    return f"compute.globalOperations.{verb}", call.request(operation=call.resource)


def _get_operation(call: Call) -> Json:
    call.log(*_operation_request(call, "get"))
    return operation_message(call, call.project.operation(call.resource, call.region or None, call.zone or None))


def _wait_operation(call: Call) -> Json:
    # The operation as it is now: `compute_api` asks again until it is DONE or the wait's deadline.
    call.log(*_operation_request(call, "wait"))
    return operation_message(call, call.project.operation(call.resource, call.region or None, call.zone or None))


# (HTTP method, collection, names one resource, verb) -> the call
ROUTES: dict[tuple[str, str, bool, str | None], Callable[[Call], Json]] = {
    ("GET", "networks", True, None): _get_network,
    ("GET", "networks", False, None): _list_networks,
    ("DELETE", "networks", True, None): _delete_network,
    ("GET", "subnetworks", True, None): _get_subnetwork,
    ("GET", "subnetworks", False, None): _list_subnetworks,
    ("DELETE", "subnetworks", True, None): _delete_subnetwork,
    ("POST", "subnetworks", True, "setPrivateIpGoogleAccess"): _set_private_ip_google_access,
    ("GET", "firewalls", True, None): _get_firewall,
    ("GET", "firewalls", False, None): _list_firewalls,
    ("POST", "firewalls", False, None): _insert_firewall,
    ("PATCH", "firewalls", True, None): _patch_firewall,
    ("DELETE", "firewalls", True, None): _delete_firewall,
    ("GET", "routers", True, None): _get_router,
    ("GET", "routers", False, None): _list_routers,
    ("POST", "routers", False, None): _insert_router,
    ("DELETE", "routers", True, None): _delete_router,
    ("GET", "operations", True, None): _get_operation,
    ("POST", "operations", True, "wait"): _wait_operation,
}
