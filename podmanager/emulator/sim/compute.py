"""The simulated project's network side: Compute Engine's networks, subnetworks, firewall rules,
Cloud Routers and their operations, over the `ComputeState` the simulated cloud keeps (and
saves) with the rest of its state.

The project starts as a new Google Cloud project does: an auto-mode `default` network, its
subnetwork in every region (made when a region is first asked about; 10.128.0.0/9 ranges,
no Private Google Access), the default firewall rules (`default-allow-internal` from
10.128.0.0/9 on every port, `-ssh`, `-rdp`, `-icmp`), no Cloud Router and no NAT. Changes
come through the same calls the API has (a test deletes a rule, turns Private Google Access
on, adds a router with NAT), so the emulator serves them all. Operations are done at once
(an instance's after a latency: `sim/instances.py`, the VMs over the same state).
Errors are the taxonomy's (`cloud/errors.py`); the emulator's route turns them into HTTP.
"""

from __future__ import annotations

import itertools
from typing import Callable

from podmanager.cloud import errors as cloud_errors
from podmanager.cloud.network import Allowed, FirewallRule, Network, Router, Subnetwork
from podmanager.emulator.rulebook import INSTANCE_CREATE_S, INSTANCE_DELETE_S
from podmanager.emulator.sim.records import ComputeOperation, ComputeState

DEFAULT_NETWORK = "default"
AUTO_MODE_RANGE = "10.128.0.0/9"  # every auto-mode subnetwork's range lies in it
_ids = itertools.count(1)


def _new_project_rules() -> list[FirewallRule]:
    every_port = [Allowed(protocol="tcp", ports=["0-65535"]), Allowed(protocol="udp", ports=["0-65535"]),
                  Allowed(protocol="icmp")]
    anywhere = ["0.0.0.0/0"]
    return [
        FirewallRule(name="default-allow-internal", network=DEFAULT_NETWORK, priority=65534,
                     source_ranges=[AUTO_MODE_RANGE], allowed=every_port),
        FirewallRule(name="default-allow-ssh", network=DEFAULT_NETWORK, priority=65534, source_ranges=anywhere,
                     allowed=[Allowed(protocol="tcp", ports=["22"])]),
        FirewallRule(name="default-allow-rdp", network=DEFAULT_NETWORK, priority=65534, source_ranges=anywhere,
                     allowed=[Allowed(protocol="tcp", ports=["3389"])]),
        FirewallRule(name="default-allow-icmp", network=DEFAULT_NETWORK, priority=65534, source_ranges=anywhere,
                     allowed=[Allowed(protocol="icmp")]),
    ]


class SimCompute:
    """Compute Engine's calls on one project's `ComputeState`; the caller holds the simulated
    cloud's lock (`SimCloud.compute`) and saves the state when `changed`."""

    def __init__(self, state: ComputeState, project: str, now: float = 0.0,
                 instance_latency: Callable[[str], tuple[float, float]] | None = None):
        self.state = state
        self.project = project
        self.now = now  # the simulated cloud's time: an instance's operation is done when it comes
        # (create, delete) seconds of a cluster's Compute Engine VMs (its `simulation`), by cluster name
        self.instance_latency = instance_latency or (lambda cluster: (INSTANCE_CREATE_S, INSTANCE_DELETE_S))
        self.changed = False
        if not state.seeded:
            self._seed()

    def _seed(self) -> None:
        self.state.networks[DEFAULT_NETWORK] = Network(name=DEFAULT_NETWORK, auto_create_subnetworks=True)
        for rule in _new_project_rules():
            self.state.firewalls[rule.name] = rule
        self.state.seeded = True
        self.changed = True

    def start_operation(self, kind: str, target: str, region: str | None = None, *, zone: str | None = None,
                        latency_s: float = 0.0) -> ComputeOperation:
        operation = ComputeOperation(name=f"operation-{len(self.state.operations) + 1}-{next(_ids)}", kind=kind,
                                     target=target, region=region, zone=zone, done_at=self.now + latency_s)
        self.state.operations[operation.name] = operation
        self.changed = True
        return operation

    def _region(self, region: str) -> None:
        """An auto-mode network has a subnetwork in every region: made when the region is first asked about."""
        if region in self.state.regions:
            return
        self.state.regions.append(region)
        for network in self.state.networks.values():
            if network.auto_create_subnetworks:
                # /20s inside 10.128.0.0/9, one per region in the order they were first asked about
                third = (len(self.state.regions) - 1) * 16
                cidr = f"10.{128 + third // 256}.{third % 256}.0/20"
                self.state.subnetworks[f"{region}/{network.name}"] = Subnetwork(
                    name=network.name, region=region, network=network.name, ip_cidr_range=cidr)
        self.changed = True

    # ------------------------------------------------------------------ networks

    def network(self, name: str) -> Network:
        found = self.state.networks.get(name)
        if found is None:
            raise cloud_errors.NotFoundError(f"The resource 'projects/{self.project}/global/networks/{name}' was not found")
        return found

    def networks(self) -> list[Network]:
        return list(self.state.networks.values())

    def delete_network(self, name: str) -> ComputeOperation:
        self.network(name)
        if any(s.network == name for s in self.state.subnetworks.values()):
            raise cloud_errors.InvalidRequestError(f"The network resource '{name}' is already being used by a subnetwork")
        del self.state.networks[name]
        return self.start_operation("delete", f"global/networks/{name}")

    # ------------------------------------------------------------------ subnetworks

    def subnetworks(self, region: str) -> list[Subnetwork]:
        self._region(region)
        return [s for s in self.state.subnetworks.values() if s.region == region]

    def subnetwork(self, region: str, name: str) -> Subnetwork:
        self._region(region)
        found = self.state.subnetworks.get(f"{region}/{name}")
        if found is None:
            raise cloud_errors.NotFoundError(
                f"The resource 'projects/{self.project}/regions/{region}/subnetworks/{name}' was not found")
        return found

    def set_private_ip_google_access(self, region: str, name: str, enabled: bool) -> ComputeOperation:
        found = self.subnetwork(region, name)
        self.state.subnetworks[f"{region}/{name}"] = found.model_copy(update={"private_ip_google_access": enabled})
        return self.start_operation("setPrivateIpGoogleAccess", f"regions/{region}/subnetworks/{name}", region)

    def delete_subnetwork(self, region: str, name: str) -> ComputeOperation:
        self.subnetwork(region, name)
        del self.state.subnetworks[f"{region}/{name}"]
        return self.start_operation("delete", f"regions/{region}/subnetworks/{name}", region)

    # ------------------------------------------------------------------ firewall rules

    def firewalls(self) -> list[FirewallRule]:
        return list(self.state.firewalls.values())

    def firewall(self, name: str) -> FirewallRule:
        found = self.state.firewalls.get(name)
        if found is None:
            raise cloud_errors.NotFoundError(f"The resource 'projects/{self.project}/global/firewalls/{name}' was not found")
        return found

    def _may_change_firewalls(self, verb: str, name: str) -> None:
        if self.state.firewall_changes_denied:
            raise cloud_errors.PermissionDeniedError(
                f"Required 'compute.firewalls.{verb}' permission for 'projects/{self.project}/global/firewalls/{name}'")

    def insert_firewall(self, rule: FirewallRule) -> ComputeOperation:
        self._may_change_firewalls("create", rule.name)
        if rule.name in self.state.firewalls:
            raise cloud_errors.AlreadyExistsError(
                f"The resource 'projects/{self.project}/global/firewalls/{rule.name}' already exists")
        self.network(rule.network)
        # A rule either allows or denies: https://cloud.google.com/firewall/docs/firewalls#rule_assignment
        # ("Each firewall rule either allows or denies traffic").
        if bool(rule.allowed) == bool(rule.denied):
            raise cloud_errors.InvalidRequestError(
                f"Invalid value for field 'resource.allowed' of {rule.name}: a rule needs exactly one of "
                "allowed or denied")
        self.state.firewalls[rule.name] = rule
        return self.start_operation("insert", f"global/firewalls/{rule.name}")

    def patch_firewall(self, name: str, source_ranges: list[str]) -> ComputeOperation:
        """The rule's source ranges replaced (the one field podmanager patches). firewalls.patch
        "uses the JSON merge patch format": a field the body names replaces the rule's
        (https://cloud.google.com/compute/docs/reference/rest/v1/firewalls/patch). An ingress rule
        left with no source would admit 0.0.0.0/0 ("If you don't specify a source ... Google Cloud
        uses 0.0.0.0/0", https://cloud.google.com/firewall/docs/firewalls#sources_for_rules): refused."""
        self._may_change_firewalls("update", name)
        rule = self.firewall(name)
        if not source_ranges and not rule.source_tags:
            raise cloud_errors.InvalidRequestError(
                f"Invalid value for field 'resource.sourceRanges' of {name}: podmanager's emulator refuses a rule "
                "left with no source (Google Cloud would admit 0.0.0.0/0)")
        self.state.firewalls[name] = rule.model_copy(update={"source_ranges": list(source_ranges)})
        return self.start_operation("patch", f"global/firewalls/{name}")

    def delete_firewall(self, name: str) -> ComputeOperation:
        self._may_change_firewalls("delete", name)
        self.firewall(name)
        del self.state.firewalls[name]
        return self.start_operation("delete", f"global/firewalls/{name}")

    def deny_firewall_changes(self, denied: bool = True) -> None:
        """The caller may not create or delete rules (a Shared VPC's host project, a narrow role)."""
        self.state.firewall_changes_denied = denied
        self.changed = True

    # ------------------------------------------------------------------ routers

    def routers(self, region: str) -> list[Router]:
        return [r for r in self.state.routers.values() if r.region == region]

    def router(self, region: str, name: str) -> Router:
        found = self.state.routers.get(f"{region}/{name}")
        if found is None:
            raise cloud_errors.NotFoundError(f"The resource 'projects/{self.project}/regions/{region}/routers/{name}' was not found")
        return found

    def insert_router(self, router: Router) -> ComputeOperation:
        key = f"{router.region}/{router.name}"
        if key in self.state.routers:
            raise cloud_errors.AlreadyExistsError(
                f"The resource 'projects/{self.project}/regions/{router.region}/routers/{router.name}' already exists")
        self.network(router.network)
        self.state.routers[key] = router
        return self.start_operation("insert", f"regions/{router.region}/routers/{router.name}", router.region)

    def delete_router(self, region: str, name: str) -> ComputeOperation:
        self.router(region, name)
        del self.state.routers[f"{region}/{name}"]
        return self.start_operation("delete", f"regions/{region}/routers/{name}", region)

    # ------------------------------------------------------------------ operations

    def operation(self, name: str, region: str | None = None, zone: str | None = None) -> ComputeOperation:
        found = self.state.operations.get(name)
        if found is None or found.region != region or found.zone != zone:
            where = f"regions/{region}" if region else f"zones/{zone}" if zone else "global"
            raise cloud_errors.NotFoundError(f"The resource 'projects/{self.project}/{where}/operations/{name}' was not found")
        return found
