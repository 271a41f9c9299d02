"""The cluster's controller VM (issue 36), made, found and deleted through the Compute Engine API,
with the one firewall rule that lets the caller reach its channel. Not used by `up` yet.

- **The VM** `<cluster>-controller`: the spec's `controller:` machine type, zone and disk; the
  spec's network and subnetwork, the cluster's own controller account when `up` made it (else
  the spec's `network.service_account`, else the project's default: `cluster_accounts.py`), with the
  `cloud-platform` scope (it calls Cloud TPU, Compute Engine, Secret Manager and Cloud Storage);
  an external IP (the laptop reaches it); labelled as the TPU nodes are (`podmanager-cluster`)
  plus `podmanager-role: controller`; the cluster's network tag (its internal rule lets the
  hosts and the head reach each other) and its own; the startup script given, and guest
  attributes turned on (`enable-guest-attributes`: its boot and channel are reported through them).
- **Its zone**: `controller.zone`, else the nearest zone that offers the machine type
  (`nearest_zones`): the spec's zones, the other zones of their region, then the zones of the
  other regions of the same continent (the region name's first part, `us` of `us-central2`),
  regions sharing the longest name with the slices' first (us-central2: us-central1, then
  us-east1, ...). A region that offers TPUs may offer no general-purpose VM (us-central2), and
  the VPC spans regions: the controller reaches the hosts over it (the cluster's rule admits
  its tag, whatever its address). Not beyond the continent (every call of the head to its
  hosts would cross an ocean), nor beyond the region when `network.subnetwork` names the
  slices' subnetwork (a subnetwork is regional). A zone that does not offer it, or that the
  project lacks, is refused naming `controller.zone`; a machine type no candidate offers,
  naming `controller.machine_type` with `controller.zone` as the other fix; both before
  anything is created (exit 2).
- **The rule** `pm-<cluster>-channel`: TCP on the channel's port, from the callers' addresses
  (each a /32: every laptop of the user that `up` or `access add` admitted), to the controller's
  tag alone. `up` adds its caller to the list and keeps the others (a second laptop's `up` never
  locks the first out); a range wider than one address found there is dropped, never kept; a rule
  with another port or target is made again with the same callers.

Changed in place (`change_controller_vm`, what `client/controller_plan.py` plans): its startup
script, its machine type and a larger disk, then booted again on the same disk.

Idempotent: `create_controller_vm` finds what an interrupted call left (the rule, the VM still
provisioning) and finishes it, and starts a stopped VM (resumes a suspended one) again; a second
call changes nothing. `delete_controller_vm` deletes the VM in
whichever state (stopped and suspended too); of nothing is fine.
"""

from __future__ import annotations

import ipaddress
import os

from pydantic import BaseModel, ConfigDict

from podmanager.cloud import errors as cloud_errors
from podmanager.cloud.base import CLUSTER_LABEL
from podmanager.cloud.gcp.cluster_accounts import controller_account
from podmanager.cloud.gcp.compute import ComputeNetworks
from podmanager.cloud.gcp.instances import ComputeInstances
from podmanager.cloud.instances import (
    CONTROLLER_ROLE,
    LEAVING_STATES,
    ROLE_LABEL,
    RUNNING,
    SETTLING_STATES,
    STOPPED,
    SUSPENDED,
    Instance,
)
from podmanager.cloud.network import Allowed, FirewallRule, region_of, short_name
from podmanager.core.clock import poll_until
from podmanager.core.errors import SpecError, TimeoutExceededError
from podmanager.core.network_names import cluster_tag, network_project
from podmanager.core.spec import CLOUD_PLATFORM_SCOPE, ClusterSpec

STARTUP_SCRIPT_KEY = "startup-script"  # the metadata key Compute Engine runs at every boot


class ControllerVmDeleted(BaseModel):
    """What `delete_controller_vm` removed: names, None where there was nothing."""

    model_config = ConfigDict(frozen=True)

    instance: str | None
    rule: str | None


def controller_vm_name(cluster: str) -> str:
    return f"{cluster}-controller"


def channel_rule_name(cluster: str) -> str:
    return f"pm-{cluster}-channel"


def opening_rule_name(cluster: str) -> str:
    """`podmanager access add`'s short opening of the channel's port (client/channel_access.py)."""
    return f"pm-{cluster}-channel-open"


def controller_tag(cluster: str) -> str:
    """The network tag only the controller carries: what the channel's rule admits traffic to."""
    return f"pm-{cluster}-controller"


def _labels(cluster: str) -> dict[str, str]:
    return {CLUSTER_LABEL: cluster, ROLE_LABEL: CONTROLLER_ROLE}


def caller_range(caller: str) -> str:
    """`caller` as one address's range (203.0.113.7/32; IPv6: /128); SpecError for anything wider."""
    try:
        network = ipaddress.ip_network(caller, strict=True)
    except ValueError:
        network = None
    if network is None or network.prefixlen != network.max_prefixlen:
        raise SpecError(f"caller: {caller!r} is not one address; the channel's firewall rule admits only the "
                        "caller's own address", hint="Give it as ADDRESS/32 (IPv6: /128), e.g. 203.0.113.7/32.")
    return str(network)


def continent(region: str) -> str:
    """The continent part of a region's name: `us` of us-central2, `europe` of europe-west4."""
    return region.split("-", 1)[0]


def nearest_zones(slice_zones: list[str], zones_by_region: dict[str, list[str]], *, in_region_only: bool) -> list[str]:
    """The zones a controller may take, nearest the slices first (pure; see the module's
    docstring): the slices' zones of their region, that region's other zones, then the other
    regions of its continent, those sharing the longest name with it first, then by name."""
    region = region_of(slice_zones[0])
    ordered = [zone for zone in slice_zones if region_of(zone) == region]
    ordered += [zone for zone in sorted(zones_by_region.get(region, [])) if zone not in ordered]
    if in_region_only:
        return ordered

    def shared(other: str) -> int:
        return len(os.path.commonprefix([region, other]))

    others = sorted((r for r in zones_by_region if r != region and continent(r) == continent(region)),
                    key=lambda r: (-shared(r), r))
    return ordered + [zone for other in others for zone in sorted(zones_by_region[other])]


def choose_zone(spec: ClusterSpec, instances: ComputeInstances) -> str:
    """The controller's zone (see the module's docstring); SpecError naming the field to fix."""
    wanted, machine_type = spec.controller.zone, spec.controller.machine_type
    slice_zones = list(spec.zones or [])
    by_region = instances.zones_by_region()
    if wanted:
        region = region_of(wanted)
        in_region = sorted(by_region.get(region, []))
        if wanted not in in_region:
            raise SpecError(f"controller.zone: project {instances.project} has no zone {wanted}",
                            hint=f"Name a zone of region {region} ({', '.join(in_region) or 'none found'}), or leave "
                                 "controller.zone out: up chooses one that offers controller.machine_type.")
        if instances.offers(wanted, machine_type):
            return wanted
        offering = [zone for zone in in_region if zone != wanted and instances.offers(zone, machine_type)]
        if offering:
            raise SpecError(f"controller.zone: {wanted} does not offer machine type {machine_type} "
                            "(controller.machine_type)",
                            hint=f"Set controller.zone to a zone of {region} that does ({', '.join(offering)}), or "
                                 "leave it out: up chooses one.")
        where = f"region {region}"
    else:
        region = region_of(slice_zones[0])
        in_region_only = bool(spec.network and spec.network.subnetwork)
        for zone in nearest_zones(slice_zones, by_region, in_region_only=in_region_only):
            if instances.offers(zone, machine_type):
                return zone
        where = (f"region {region} (network.subnetwork is there)" if in_region_only
                 else f"region {region} or the other {continent(region)}- regions")
    raise SpecError(f"controller.machine_type: no zone of {where} offers machine type {machine_type}",
                    hint=f"Choose a general-purpose machine type offered there (the default is e2-standard-4), or set "
                         f"controller.zone to a zone that offers it; list them with: gcloud compute machine-types "
                         f"list --filter=name={machine_type} --project {instances.project}")


def controller_instance(spec: ClusterSpec, zone: str, startup_script: str) -> Instance:
    """The controller VM as it is asked for (pure)."""
    network = spec.network
    in_project = network_project(spec)
    return Instance(
        name=controller_vm_name(spec.name), zone=zone, machine_type=spec.controller.machine_type,
        labels=_labels(spec.name),
        network=short_name(network.network) if network and network.network else "default",
        subnetwork=short_name(network.subnetwork) if network and network.subnetwork else "",
        network_project="" if in_project == spec.project else in_project,
        external_ip=True,  # the laptop reaches its channel from outside the VPC
        service_account=controller_account(spec) or "default",
        scopes=[CLOUD_PLATFORM_SCOPE],
        # Google takes guest attributes (how the VM reports its boot and its channel) only with this on.
        metadata={STARTUP_SCRIPT_KEY: startup_script, "enable-guest-attributes": "TRUE"},
        tags=list(dict.fromkeys([*(network.tags if network else []), cluster_tag(spec.name),
                                 controller_tag(spec.name)])),
        disk_gb=spec.controller.disk_gb)


def channel_rule(spec: ClusterSpec, caller: str, port: int) -> FirewallRule:
    """The rule admitting `caller` (one address) to the controller's channel port, and nothing else."""
    network = spec.network.network if spec.network and spec.network.network else "default"
    return FirewallRule(name=channel_rule_name(spec.name), network=short_name(network),
                        source_ranges=[caller_range(caller)], target_tags=[controller_tag(spec.name)],
                        allowed=[Allowed(protocol="tcp", ports=[str(port)])])


def find_controller_vm(spec: ClusterSpec, instances: ComputeInstances) -> Instance | None:
    """The cluster's controller VM, in whichever zone, by its labels; None when there is none."""
    found = [vm for vm in instances.labelled(_labels(spec.name)) if vm.name == controller_vm_name(spec.name)]
    return found[0] if found else None


def create_controller_vm(spec: ClusterSpec, *, instances: ComputeInstances, networks: ComputeNetworks,
                         caller: str, port: int, startup_script: str, timeout_s: float = 300.0) -> Instance:
    """The controller VM, RUNNING, and its channel rule admitting `caller` alone (module docstring)."""
    rule = channel_rule(spec, caller, port)  # a bad caller is refused before any call
    existing = _settled(spec, instances, timeout_s)
    zone = existing.zone if existing is not None else choose_zone(spec, instances)
    _ensure_rule(rule, networks.in_project(network_project(spec)))
    if existing is None:
        try:
            instances.create(controller_instance(spec, zone, startup_script), timeout_s=timeout_s)
        except cloud_errors.AlreadyExistsError:
            pass  # made meanwhile (another create): wait for it below
    elif existing.status == STOPPED:  # stopped (by someone, or a host error): it boots again on its disk
        instances.start(zone, existing.name, timeout_s=timeout_s)
    elif existing.status == SUSPENDED:
        instances.resume(zone, existing.name, timeout_s=timeout_s)
    return _wait_running(instances, zone, controller_vm_name(spec.name), timeout_s)


def change_controller_vm(spec: ClusterSpec, *, instances: ComputeInstances, networks: ComputeNetworks,
                         caller: str, port: int, startup_script: str, machine_type: str = "", disk_gb: int = 0,
                         timeout_s: float = 300.0) -> Instance:
    """The controller VM changed in place, RUNNING again on the same boot disk (the state the
    controller keeps there with it), and its channel rule admitting `caller` alone: its
    startup script replaced (`startup_script`: it runs at the boot that ends this), its disk
    grown to `disk_gb` (0: kept; Google grows a disk while the VM runs), then booted again on
    it: stopped, its machine type set to `machine_type` (Google requires it TERMINATED) and
    started, or, with the machine type kept, reset (started, if it was stopped). A suspended VM
    is resumed first. The zone is never changed (no VM moves in place)."""
    rule = channel_rule(spec, caller, port)  # a bad caller is refused before any call
    vm = _settled(spec, instances, timeout_s)
    if vm is None:
        raise cloud_errors.CloudError(f"controller VM {controller_vm_name(spec.name)} went away before it was changed",
                                      hint="Run 'podmanager up' again: it creates the controller VM anew.")
    _ensure_rule(rule, networks.in_project(network_project(spec)))
    if vm.status == SUSPENDED:  # its memory restored, then changed as a running VM
        instances.resume(vm.zone, vm.name, timeout_s=timeout_s)
    if vm.status != STOPPED:  # still provisioning, or resumed: a reset needs it RUNNING
        vm = _wait_running(instances, vm.zone, vm.name, timeout_s)
    if disk_gb and disk_gb != vm.disk_gb:
        instances.resize_disk(vm.zone, vm.disk or vm.name, disk_gb, timeout_s=timeout_s)
    if vm.metadata.get(STARTUP_SCRIPT_KEY) != startup_script:
        instances.set_metadata(vm, {**vm.metadata, STARTUP_SCRIPT_KEY: startup_script}, timeout_s=timeout_s)
    if machine_type and machine_type != vm.machine_type:
        if vm.status != STOPPED:
            instances.stop(vm.zone, vm.name, timeout_s=timeout_s)
            _wait_status(instances, vm.zone, vm.name, STOPPED, timeout_s)
        instances.set_machine_type(vm.zone, vm.name, machine_type, timeout_s=timeout_s)
        instances.start(vm.zone, vm.name, timeout_s=timeout_s)
    elif vm.status == STOPPED:  # started, its startup script runs
        instances.start(vm.zone, vm.name, timeout_s=timeout_s)
    else:
        instances.reset(vm.zone, vm.name, timeout_s=timeout_s)
    return _wait_running(instances, vm.zone, vm.name, timeout_s)


def delete_controller_vm(spec: ClusterSpec, *, instances: ComputeInstances, networks: ComputeNetworks,
                         timeout_s: float = 300.0) -> ControllerVmDeleted:
    """The controller VM and its channel rule deleted, whichever exist; waits until the VM is gone."""
    found = find_controller_vm(spec, instances)
    settled = _settled(spec, instances, timeout_s) if found is not None else None
    if settled is not None:  # running, stopped or suspended alike: deleted
        try:
            instances.delete(settled.zone, settled.name, timeout_s=timeout_s)
        except cloud_errors.NotFoundError:
            pass
    if found is not None:
        _wait_gone(spec, instances, timeout_s)
    name = channel_rule_name(spec.name)
    try:
        networks.in_project(network_project(spec)).delete_firewall(name)
    except cloud_errors.NotFoundError:
        name = None
    rules = networks.in_project(network_project(spec))
    if rules.firewall(opening_rule_name(spec.name)) is not None:  # an `access add` cut short left its opening
        try:
            rules.delete_firewall(opening_rule_name(spec.name))
        except cloud_errors.NotFoundError:
            pass
    return ControllerVmDeleted(instance=found.name if found is not None else None, rule=name)


def admitted_callers(rule: FirewallRule) -> list[str]:
    """The rule's sources that are one address each (the callers); anything wider is no caller."""
    return [r for r in rule.source_ranges if ipaddress.ip_network(r, strict=False).num_addresses == 1]


def _ensure_rule(rule: FirewallRule, networks: ComputeNetworks) -> None:
    found = networks.firewall(rule.name)
    if found is not None:
        callers = admitted_callers(found)
        rule = rule.model_copy(update={"source_ranges": callers + [r for r in rule.source_ranges if r not in callers]})
        if found == rule:
            return
        if found.model_copy(update={"source_ranges": rule.source_ranges}) == rule:
            networks.patch_firewall_sources(rule.name, rule.source_ranges)  # a caller added, or a wide range dropped
            return
        networks.delete_firewall(rule.name)  # another port or target: made again, its callers kept
    try:
        networks.create_firewall(rule)
    except cloud_errors.AlreadyExistsError:
        if networks.firewall(rule.name) != rule:
            raise


def _wait_running(instances: ComputeInstances, zone: str, name: str, timeout_s: float) -> Instance:
    def running() -> Instance | None:
        vm = instances.get(zone, name)
        if vm is None or vm.status in LEAVING_STATES:
            raise cloud_errors.CloudError(f"controller VM {name} in {zone} went away while it was being created "
                                          f"({vm.status if vm else 'deleted'})",
                                          hint="Run the command again: it creates the controller VM anew.")
        return vm if vm.status == RUNNING else None

    return poll_until(running, timeout_s=timeout_s, interval_s=instances.poll_interval_s, clock=instances.clock,
                      on_timeout=lambda: TimeoutExceededError(f"controller VM {name} in {zone} is not RUNNING after "
                                                              f"{timeout_s:g}s"))


def _wait_status(instances: ComputeInstances, zone: str, name: str, status: str, timeout_s: float) -> None:
    def there() -> bool:
        vm = instances.get(zone, name)
        if vm is None:
            raise cloud_errors.CloudError(f"controller VM {name} in {zone} went away while it was being changed",
                                          hint="Run 'podmanager up' again: it creates the controller VM anew.")
        return vm.status == status

    poll_until(there, timeout_s=timeout_s, interval_s=instances.poll_interval_s, clock=instances.clock,
               what=f"controller VM {name} to be {status}")


def _settled(spec: ClusterSpec, instances: ComputeInstances, timeout_s: float) -> Instance | None:
    """The controller VM once it is past STOPPING or SUSPENDING (a stop, a suspension, or a
    delete under way), None when there is none (or a delete took it)."""
    def settled() -> tuple[Instance | None] | None:
        vm = find_controller_vm(spec, instances)
        return (vm,) if vm is None or vm.status not in SETTLING_STATES else None

    return poll_until(settled, timeout_s=timeout_s, interval_s=instances.poll_interval_s, clock=instances.clock,
                      what=f"controller VM {controller_vm_name(spec.name)} to stop, suspend or go")[0]


def _wait_gone(spec: ClusterSpec, instances: ComputeInstances, timeout_s: float) -> None:
    poll_until(lambda: find_controller_vm(spec, instances) is None, timeout_s=timeout_s,
               interval_s=instances.poll_interval_s, clock=instances.clock,
               what=f"the deletion of controller VM {controller_vm_name(spec.name)}")
