"""Compute Engine's calls on the simulated project, in the client library's own types: each
takes the request (`Call`), logs it and answers the message the API would (`compute_api.py`
routes to them)."""

from __future__ import annotations

import json
from typing import Any, Callable

from google.cloud import compute_v1

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
Log = Callable[[str, Any], None]


class Call:
    """One request: the project's records, the path's parts and the body."""

    def __init__(self, project: SimCompute, log: Log, where: dict[str, str | None], body: dict[str, Any],
                 query: dict[str, list[str]] | None = None):
        self.project, self.log, self.body = project, log, body
        self.name = where["project"] or project.project  # as the caller named it: any project is served
        self.region = where["region"] or ""
        self.zone = where["zone"] or ""
        self.resource = where["name"] or ""
        self.query = query or {}

    def network_url(self, name: str) -> str:
        return f"{ROOT}/projects/{self.name}/global/networks/{name}"


# ---------------------------------------------------------------------- records as the API's messages


def _network(call: Call, network: Network) -> compute_v1.Network:
    return compute_v1.Network(name=network.name, auto_create_subnetworks=network.auto_create_subnetworks,
                              self_link=call.network_url(network.name))


def _subnetwork(call: Call, subnetwork: Subnetwork) -> compute_v1.Subnetwork:
    region = f"{ROOT}/projects/{call.name}/regions/{subnetwork.region}"
    return compute_v1.Subnetwork(name=subnetwork.name, region=region, network=call.network_url(subnetwork.network),
                                 ip_cidr_range=subnetwork.ip_cidr_range,
                                 private_ip_google_access=subnetwork.private_ip_google_access,
                                 self_link=f"{region}/subnetworks/{subnetwork.name}")


def _firewall(call: Call, rule: FirewallRule) -> compute_v1.Firewall:
    return compute_v1.Firewall(
        name=rule.name, network=call.network_url(rule.network), direction=rule.direction, priority=rule.priority,
        source_ranges=rule.source_ranges, source_tags=rule.source_tags, target_tags=rule.target_tags,
        allowed=[compute_v1.Allowed(I_p_protocol=a.protocol, ports=a.ports) for a in rule.allowed],
        denied=[compute_v1.Denied(I_p_protocol=d.protocol, ports=d.ports) for d in rule.denied],
        destination_ranges=rule.destination_ranges,
        disabled=rule.disabled, self_link=f"{ROOT}/projects/{call.name}/global/firewalls/{rule.name}")


def _firewall_record(message: compute_v1.Firewall) -> FirewallRule:
    return FirewallRule(
        name=message.name, network=short_name(message.network or "default"), direction=message.direction or "INGRESS",
        priority=message.priority if "priority" in message else 1000, source_ranges=list(message.source_ranges),
        source_tags=list(message.source_tags), target_tags=list(message.target_tags),
        allowed=[Allowed(protocol=a.I_p_protocol, ports=list(a.ports)) for a in message.allowed],
        denied=[Allowed(protocol=d.I_p_protocol, ports=list(d.ports)) for d in message.denied],
        destination_ranges=list(message.destination_ranges), disabled=message.disabled)


def _router(call: Call, router: Router) -> compute_v1.Router:
    region = f"{ROOT}/projects/{call.name}/regions/{router.region}"
    nats = [compute_v1.RouterNat(name=nat.name, source_subnetwork_ip_ranges_to_nat=nat.source_subnetwork_ip_ranges_to_nat,
                                 subnetworks=[compute_v1.RouterNatSubnetworkToNat(name=f"{region}/subnetworks/{s}")
                                              for s in nat.subnetworks])
            for nat in router.nats]
    return compute_v1.Router(name=router.name, region=region, network=call.network_url(router.network), nats=nats,
                             self_link=f"{region}/routers/{router.name}")


def _router_record(call: Call, message: compute_v1.Router) -> Router:
    nats = [Nat(name=nat.name, source_subnetwork_ip_ranges_to_nat=nat.source_subnetwork_ip_ranges_to_nat,
                subnetworks=[short_name(s.name) for s in nat.subnetworks]) for nat in message.nats]
    return Router(name=message.name, region=call.region, network=short_name(message.network), nats=nats)


def operation_message(call: Call, operation: ComputeOperation) -> compute_v1.Operation:
    where = (f"regions/{operation.region}" if operation.region else f"zones/{operation.zone}" if operation.zone
             else "global")
    done = call.project.now >= operation.done_at
    scope = ({"region": f"{ROOT}/projects/{call.name}/regions/{operation.region}"} if operation.region
             else {"zone": f"{ROOT}/projects/{call.name}/zones/{operation.zone}"} if operation.zone else {})
    return compute_v1.Operation(
        name=operation.name, operation_type=operation.kind, progress=100 if done else 0,
        status=compute_v1.Operation.Status.DONE if done else compute_v1.Operation.Status.RUNNING,
        target_link=f"{ROOT}/projects/{call.name}/{operation.target}",
        self_link=f"{ROOT}/projects/{call.name}/{where}/operations/{operation.name}", **scope)


# ---------------------------------------------------------------------- the calls


def get_project(project: str, log: Log) -> compute_v1.Project:
    """The project as `projects.get` answers it: what the VMs run as unless told otherwise."""
    log("compute.projects.get", compute_v1.GetProjectRequest(project=project))
    return compute_v1.Project(name=project, id=int(SIMULATED_PROJECT_NUMBER),
                              default_service_account=f"{SIMULATED_PROJECT_NUMBER}-compute@developer.gserviceaccount.com")


def _get_network(call: Call) -> Any:
    call.log("compute.networks.get", compute_v1.GetNetworkRequest(project=call.name, network=call.resource))
    return _network(call, call.project.network(call.resource))


def _list_networks(call: Call) -> Any:
    call.log("compute.networks.list", compute_v1.ListNetworksRequest(project=call.name))
    return compute_v1.NetworkList(items=[_network(call, n) for n in call.project.networks()])


def _delete_network(call: Call) -> Any:
    call.log("compute.networks.delete", compute_v1.DeleteNetworkRequest(project=call.name, network=call.resource))
    return operation_message(call, call.project.delete_network(call.resource))


def _get_subnetwork(call: Call) -> Any:
    call.log("compute.subnetworks.get", compute_v1.GetSubnetworkRequest(
        project=call.name, region=call.region, subnetwork=call.resource))
    return _subnetwork(call, call.project.subnetwork(call.region, call.resource))


def _list_subnetworks(call: Call) -> Any:
    call.log("compute.subnetworks.list", compute_v1.ListSubnetworksRequest(project=call.name, region=call.region))
    return compute_v1.SubnetworkList(items=[_subnetwork(call, s) for s in call.project.subnetworks(call.region)])


def _delete_subnetwork(call: Call) -> Any:
    call.log("compute.subnetworks.delete", compute_v1.DeleteSubnetworkRequest(
        project=call.name, region=call.region, subnetwork=call.resource))
    return operation_message(call, call.project.delete_subnetwork(call.region, call.resource))


def _set_private_ip_google_access(call: Call) -> Any:
    asked = compute_v1.SubnetworksSetPrivateIpGoogleAccessRequest.from_json(json.dumps(call.body),
                                                                             ignore_unknown_fields=True)
    call.log("compute.subnetworks.setPrivateIpGoogleAccess", compute_v1.SetPrivateIpGoogleAccessSubnetworkRequest(
        project=call.name, region=call.region, subnetwork=call.resource,
        subnetworks_set_private_ip_google_access_request_resource=asked))
    return operation_message(call, call.project.set_private_ip_google_access(
        call.region, call.resource, asked.private_ip_google_access))


def _get_firewall(call: Call) -> Any:
    call.log("compute.firewalls.get", compute_v1.GetFirewallRequest(project=call.name, firewall=call.resource))
    return _firewall(call, call.project.firewall(call.resource))


def _list_firewalls(call: Call) -> Any:
    call.log("compute.firewalls.list", compute_v1.ListFirewallsRequest(project=call.name))
    return compute_v1.FirewallList(items=[_firewall(call, r) for r in call.project.firewalls()])


def _insert_firewall(call: Call) -> Any:
    asked = compute_v1.Firewall.from_json(json.dumps(call.body), ignore_unknown_fields=True)
    call.log("compute.firewalls.insert", compute_v1.InsertFirewallRequest(project=call.name, firewall_resource=asked))
    return operation_message(call, call.project.insert_firewall(_firewall_record(asked)))


def _delete_firewall(call: Call) -> Any:
    call.log("compute.firewalls.delete", compute_v1.DeleteFirewallRequest(project=call.name, firewall=call.resource))
    return operation_message(call, call.project.delete_firewall(call.resource))


def _get_router(call: Call) -> Any:
    call.log("compute.routers.get", compute_v1.GetRouterRequest(project=call.name, region=call.region,
                                                                router=call.resource))
    return _router(call, call.project.router(call.region, call.resource))


def _list_routers(call: Call) -> Any:
    call.log("compute.routers.list", compute_v1.ListRoutersRequest(project=call.name, region=call.region))
    return compute_v1.RouterList(items=[_router(call, r) for r in call.project.routers(call.region)])


def _insert_router(call: Call) -> Any:
    asked = compute_v1.Router.from_json(json.dumps(call.body), ignore_unknown_fields=True)
    call.log("compute.routers.insert", compute_v1.InsertRouterRequest(project=call.name, region=call.region,
                                                                      router_resource=asked))
    return operation_message(call, call.project.insert_router(_router_record(call, asked)))


def _delete_router(call: Call) -> Any:
    call.log("compute.routers.delete", compute_v1.DeleteRouterRequest(project=call.name, region=call.region,
                                                                      router=call.resource))
    return operation_message(call, call.project.delete_router(call.region, call.resource))


def _operation_request(call: Call, verb: str) -> tuple[str, Any]:
    """The logged method and request of an operation's get or wait, by its scope."""
    names = {"project": call.name, "operation": call.resource}
    if call.zone:
        kind = compute_v1.GetZoneOperationRequest if verb == "get" else compute_v1.WaitZoneOperationRequest
        return f"compute.zoneOperations.{verb}", kind(zone=call.zone, **names)
    if call.region:
        kind = compute_v1.GetRegionOperationRequest if verb == "get" else compute_v1.WaitRegionOperationRequest
        return f"compute.regionOperations.{verb}", kind(region=call.region, **names)
    kind = compute_v1.GetGlobalOperationRequest if verb == "get" else compute_v1.WaitGlobalOperationRequest
    return f"compute.globalOperations.{verb}", kind(**names)


def _get_operation(call: Call) -> Any:
    call.log(*_operation_request(call, "get"))
    return operation_message(call, call.project.operation(call.resource, call.region or None, call.zone or None))


def _wait_operation(call: Call) -> Any:
    # The operation as it is now: `compute_api` asks again until it is DONE or the wait's deadline.
    call.log(*_operation_request(call, "wait"))
    return operation_message(call, call.project.operation(call.resource, call.region or None, call.zone or None))


# (HTTP method, collection, names one resource, verb) -> the call
ROUTES: dict[tuple[str, str, bool, str | None], Callable[[Call], Any]] = {
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
    ("DELETE", "firewalls", True, None): _delete_firewall,
    ("GET", "routers", True, None): _get_router,
    ("GET", "routers", False, None): _list_routers,
    ("POST", "routers", False, None): _insert_router,
    ("DELETE", "routers", True, None): _delete_router,
    ("GET", "operations", True, None): _get_operation,
    ("POST", "operations", True, "wait"): _wait_operation,
}
