"""The network checked before `up` creates anything, each failure a SpecError (exit 2) that
names the fix; then the cluster's own firewall rule, made here and deleted by `down`.

First, the APIs the cluster needs are enabled in the project (Service Usage, read once for
all: `cloud/gcp/service_usage.py`): Cloud TPU and Compute Engine always, Resource Manager
where the caller's permissions are asked and IAM where the cluster's own account is made,
Secret Manager where VMs boot (they read the Ray token from it), Cloud Storage where buckets
are used. Every one that is
off is named at once, with its activation link and the command that enables them. Then the
caller's permissions for all `up` does, in one call (`permission_preflight.py`).

The TPU VMs run as the cluster's own service account (`cloud/gcp/cluster_accounts.py`:
`pm-<cluster>-vms`, made here once the checks passed, before the first grant to it), unless the
spec's `network.service_account` names one: a secure-by-default organization's default compute
account has no role at all. The spec `up` goes on with names it, so every node, secret and bucket
grant carries it.

Read through the Compute Engine API (a dry run: the emulator's, which starts as a new project):
- the network exists, and has a subnetwork in the region of every zone (the one the spec names,
  or else the network's only one there);
- the VMs can reach what their boot needs: the package index, the Python download and the
  stage bucket. External IPs do; without them (`network.enable_external_ips: false`) they need
  Cloud NAT on a router of the region AND Private Google Access on the subnetwork;
- the cluster's VMs reach each other on every port (Ray's, JAX's coordinator, the multislice
  port, the router's are random or undocumented): `up` makes `pm-<cluster>-internal`, allowing
  TCP, UDP and ICMP between instances with the cluster's tag (`provisioning.plan.cluster_tag`,
  which every node carries). Where it may not (403), a rule that already allows it will do;
  else the missing rule is named with the command that makes it.

And no index of the spec's `boot:` is on this machine's loopback (a real VM's 127.0.0.1 is itself).
And the controller's exact Python, which the VMs install, has a download (`controller/python_downloads.py`);
the buckets the VMs read and write exist and their account may use them (`bucket_preflight.py`).
"""

from __future__ import annotations

import ipaddress
import platform
from typing import TYPE_CHECKING, Any, Callable

from podmanager.cloud import errors as cloud_errors
from podmanager.cloud.gcp.cluster_accounts import (
    VMS,
    account_id,
    accounts_for,
    with_vms_account,
)
from podmanager.cloud.network import (
    Allowed,
    FirewallRule,
    Subnetwork,
    region_of,
    short_name,
)
from podmanager.cluster.bucket_preflight import BucketCheck, bucket_needs
from podmanager.cluster.permission_preflight import needed_permissions, refuse_missing
from podmanager.controller.python_downloads import check_python_download
from podmanager.controller.staging import vms_install
from podmanager.core.errors import SpecError
from podmanager.core.events import EventKind
from podmanager.core.network_names import (
    cluster_firewall_rule,
    cluster_tag,
    network_project,
)
from podmanager.core.spec import ClusterSpec, on_loopback

if TYPE_CHECKING:
    from podmanager.cloud.gcp.compute import ComputeNetworks
    from podmanager.cloud.gcp.service_usage import DisabledApi
    from podmanager.cluster.cluster_runtime import ClusterRuntime

Record = Callable[..., Any]
_EVERY_PORT = ("tcp", "udp")


def compute_for(runtime: ClusterRuntime) -> ComputeNetworks | None:
    """The Compute Engine API beside the cluster's Cloud TPU backend: the dry run's emulator, or
    Google's with the same credentials. None when there is none to ask: a backend handed in (a
    test's in-process simulator), `TPU_EMULATOR_HOST` (`podmanager emulator`), or an emulator
    from before it served Compute Engine."""
    if not runtime.backend_from_spec:
        return None
    from podmanager.cluster.backends import make_compute

    runtime.cloud  # a dry run's emulator is started with the backend
    return make_compute(runtime.spec)


def check_before_up(runtime: ClusterRuntime) -> None:
    """Before `up` creates anything: the Python the VMs install has a download (where they
    install one), the network is checked and the cluster's firewall rule made."""
    spec = runtime.spec
    check_apis(runtime)
    # Simulated VMs that start from the controller's environment (or none at all) download nothing.
    if vms_install(spec):
        check_python_download(platform.python_version())
    compute = compute_for(runtime)
    if compute is None:
        return
    from podmanager.cluster.backends import make_project_iam

    accounts = accounts_for(spec)
    # A spec naming the cluster's own account was completed by the `up` that made it and
    # checked the caller (the user's machine, for a controller VM's `up`): not asked again.
    iam = make_project_iam(spec) if accounts.check_caller else None
    with compute:
        if iam is not None:
            with iam:
                refuse_missing(spec, iam.missing(needed_permissions(
                    spec, vms_boot=runtime.hosts is not None, makes_account=accounts.to_make)), iam.caller)
        if accounts.to_make:  # every grant and node from here on names the cluster's own account
            runtime.use_spec(with_vms_account(spec, accounts.vms))
        buckets = _bucket_check(runtime, compute)
        try:
            check_network(runtime.spec, compute, record=runtime.record, buckets=buckets,
                          before_changes=lambda: _make_vms_account(runtime) if accounts.to_make else None)
        finally:
            if buckets is not None:
                buckets.buckets.close()


def _make_vms_account(runtime: ClusterRuntime) -> None:
    """The TPU VMs' own account, made unless it exists (it needs no project role: module docstring)."""
    from podmanager.cluster.backends import make_project_iam

    iam = make_project_iam(runtime.spec)
    if iam is None:
        return
    with iam:
        email, made = iam.ensure_account(account_id(runtime.name, VMS), f"podmanager {runtime.name}: TPU VMs")
    if made:
        runtime.record(EventKind.SERVICE_ACCOUNT_CREATED, f"service account {email} created: the TPU VMs run as it")


def needed_apis(spec: ClusterSpec, *, vms_boot: bool) -> list[str]:
    """The APIs `up` of `spec` calls (the module's text)."""
    apis = ["tpu.googleapis.com", "compute.googleapis.com"]
    accounts = accounts_for(spec)
    if accounts.check_caller:
        apis.append("cloudresourcemanager.googleapis.com")
    if accounts.to_make:
        apis.append("iam.googleapis.com")
    if vms_boot:
        apis.append("secretmanager.googleapis.com")
    if bucket_needs(spec, vms_boot=vms_boot):
        apis.append("storage.googleapis.com")
    return apis


def check_apis(runtime: ClusterRuntime) -> None:
    """A SpecError (exit 2) naming every API the cluster needs that is not enabled in the
    project (SERVICE_DISABLED); nothing is asked where there is no Service Usage to ask, or the
    caller may not read it (then each call names a disabled API as it meets it)."""
    if not runtime.backend_from_spec:
        return
    from podmanager.cluster.backends import make_service_usage

    spec = runtime.spec
    runtime.cloud  # a dry run's emulator is started with the backend
    usage = make_service_usage(spec)
    if usage is None:
        return
    with usage:
        refuse_disabled(spec, usage.disabled(needed_apis(spec, vms_boot=runtime.hosts is not None)))


def refuse_disabled(spec: ClusterSpec, off: list[DisabledApi] | None) -> None:
    """A SpecError (exit 2) naming every API of `off` with its link and the command enabling them."""
    if not off:
        return
    project = spec.project or ""
    raise SpecError(f"project {project} has not enabled {len(off)} API(s) cluster {spec.name} needs "
                    "(SERVICE_DISABLED; nothing was created):\n  "
                    + "\n  ".join(f"{api.title} ({api.service}): enable it at {api.activation_url}" for api in off),
                    hint=f"Enable them: gcloud services enable {' '.join(api.service for api in off)} "
                         f"--project {project} (it takes a few minutes).")


def _bucket_check(runtime: ClusterRuntime, compute: ComputeNetworks) -> BucketCheck | None:
    """The buckets the VMs use, for `check_network` to check and grant; None when there are none
    or no Cloud Storage to ask."""
    from podmanager.cluster.backends import make_buckets

    spec = runtime.spec
    needs = bucket_needs(spec, vms_boot=runtime.hosts is not None)
    if not needs:
        return None
    buckets = make_buckets(spec)
    if buckets is None:
        return None
    account = spec.network.service_account if spec.network and spec.network.service_account else None
    return BucketCheck(spec, buckets, f"serviceAccount:{account or compute.default_service_account()}", needs)


def delete_cluster_rule(spec: ClusterSpec, compute: ComputeNetworks | None, record: Record) -> None:
    """`down`'s part: the cluster's firewall rule deleted (gone already is fine), and `compute`
    closed. A rule that cannot be deleted is said, not fatal: it lets only the cluster's own tag in."""
    if compute is None:
        return
    name = cluster_firewall_rule(spec.name)
    project = network_project(spec)
    try:
        with compute:
            compute.in_project(project).delete_firewall(name)
    except cloud_errors.NotFoundError:
        return
    except cloud_errors.CloudError as failed:
        record(EventKind.FIREWALL_LEFT, f"firewall rule {name} is left: {failed.message}; delete it with: gcloud compute "
                                f"firewall-rules delete {name} --project {project}")
        return
    record(EventKind.FIREWALL_DELETED, f"firewall rule {name} deleted")


def check_network(spec: ClusterSpec, compute: ComputeNetworks, *, record: Record,
                  buckets: BucketCheck | None = None, before_changes: Callable[[], None] = lambda: None) -> None:
    """Every check of the module's docstring, and the buckets' (`bucket_preflight.py`); one
    SpecError naming each problem and its fix before anything is made; `before_changes` runs
    once they all passed, before the first grant or rule."""
    wanted = spec.network
    network = short_name(wanted.network if wanted and wanted.network else "default")
    project = network_project(spec)
    compute = compute.in_project(project) if project != compute.project else compute
    try:
        compute.network(network)
    except cloud_errors.NotFoundError:
        raise SpecError(f"network.network: project {project} has no VPC network {network!r}",
                        hint=f"Name an existing network in the spec's network.network, or create it: gcloud compute "
                             f"networks create {network} --project {project} --subnet-mode auto") from None
    problems: list[str] = []
    subnetworks: list[Subnetwork] = []
    for region in sorted({region_of(zone) for zone in spec.zones or []}):
        found, problem = _subnetwork(compute, project, network, region, wanted.subnetwork if wanted else None)
        if found is None:
            problems.append(problem)
            continue
        subnetworks.append(found)
        if not (wanted.enable_external_ips if wanted else True):
            problems += _egress_problems(compute, project, network, found)
    if buckets is not None:
        problems += buckets.problems()
    problems += _index_problems(spec)
    if problems:
        raise SpecError(f"the project cannot carry cluster {spec.name} (nothing was created):\n  "
                        + "\n  ".join(problems))
    before_changes()
    if buckets is not None:
        buckets.grant(record)
    _ensure_cluster_rule(spec, compute, network, subnetworks, record)



def _index_problems(spec: ClusterSpec) -> list[str]:
    """The spec's indexes a TPU VM cannot reach: one on this machine's loopback, which serves a
    dry run's VMs (they share this machine) and never a real VM (its 127.0.0.1 is the VM)."""
    if spec.simulated:
        return []
    named = [("boot.index_url", spec.boot.index_url)] if spec.boot.index_url else []
    named += [(f"boot.extra_index_urls[{at}]", url) for at, url in enumerate(spec.boot.extra_index_urls)]
    return [f"{field}: {url} is this machine's loopback, which a TPU VM cannot reach (its 127.0.0.1 is the VM "
            "itself); name an https:// index the VMs reach, or an Artifact Registry repository"
            for field, url in named if on_loopback(url)]


def _subnetwork(compute: ComputeNetworks, project: str, network: str, region: str,
                named: str | None) -> tuple[Subnetwork | None, str]:
    """The subnetwork the VMs of `region` get, or (None, the problem)."""
    mine = [s for s in compute.subnetworks(region) if s.network == network]
    if named:
        name = short_name(named)
        found = next((s for s in mine if s.name == name), None)
        return found, (f"network.subnetwork: network {network} has no subnetwork {name!r} in region {region}; "
                       f"it has {', '.join(s.name for s in mine) or 'none'} there")
    if len(mine) == 1:
        return mine[0], ""
    if not mine:
        return None, (f"network.network: network {network} has no subnetwork in region {region}, where the "
                      f"spec's zones are; create one: gcloud compute networks subnets create {network}-{region} "
                      f"--project {project} --network {network} --region {region} --range RANGE "
                      f"--enable-private-ip-google-access")
    return None, (f"network.subnetwork: network {network} has {len(mine)} subnetworks in region {region} "
                  f"({', '.join(s.name for s in mine)}); name the one the TPU VMs use in network.subnetwork")


def _egress_problems(compute: ComputeNetworks, project: str, network: str, subnetwork: Subnetwork) -> list[str]:
    """Without external IPs a VM reaches the internet (the package index, the Python download)
    only through Cloud NAT, and Google's APIs (the stage bucket, the token secret) only with
    Private Google Access: what of the two the subnetwork lacks."""
    region = subnetwork.region
    routers = [r for r in compute.routers(region) if r.network == network]
    missing = []
    if not any(nat.serves(subnetwork.name) for router in routers for nat in router.nats):
        router = routers[0].name if routers else f"{network}-nat-router"
        create_router = ("" if routers else f"gcloud compute routers create {router} --project {project} "
                         f"--network {network} --region {region} && ")
        missing.append(f"Cloud NAT on a Cloud Router of network {network} in {region} (the package index and the "
                       f"Python download are on the internet): {create_router}gcloud compute routers nats create "
                       f"{network}-nat --router {router} --project {project} --region {region} "
                       f"--auto-allocate-nat-external-ips --nat-all-subnet-ip-ranges")
    if not subnetwork.private_ip_google_access:
        missing.append(f"Private Google Access on subnetwork {subnetwork.name} in {region} (the stage bucket and "
                       f"the Ray token's secret are Google APIs): gcloud compute networks subnets update "
                       f"{subnetwork.name} --project {project} --region {region} --enable-private-ip-google-access")
    if not missing:
        return []
    return [f"network.enable_external_ips is false, so the TPU VMs in {region} boot only through Cloud NAT and "
            f"Private Google Access; set network.enable_external_ips: true (the default), or add " + " and ".join(
                f"[{what}]" for what in missing)]


def cluster_rule(spec: ClusterSpec, network: str) -> FirewallRule:
    """`pm-<cluster>-internal`: TCP, UDP and ICMP between the instances carrying the cluster's tag."""
    tag = cluster_tag(spec.name)
    return FirewallRule(name=cluster_firewall_rule(spec.name), network=network, source_tags=[tag], target_tags=[tag],
                        allowed=[Allowed(protocol="tcp"), Allowed(protocol="udp"), Allowed(protocol="icmp")])


def _ensure_cluster_rule(spec: ClusterSpec, compute: ComputeNetworks, network: str, subnetworks: list[Subnetwork],
                         record: Record) -> None:
    rule = cluster_rule(spec, network)
    existing = {r.name: r for r in compute.firewalls()}
    found = existing.get(rule.name)
    if found is not None:
        if found.network != network:
            raise SpecError(f"firewall rule {rule.name} exists in network {found.network}, but the cluster's VMs "
                            f"are in {network}",
                            hint=f"Delete it (gcloud compute firewall-rules delete {rule.name} --project "
                                 f"{compute.project}) or run `down` of the cluster that made it, then `up` again.")
        return
    try:
        compute.create_firewall(rule)
    except cloud_errors.PermissionDeniedError as denied:
        covering = [r.name for r in existing.values() if r.network == network and _lets_in(r, rule, subnetworks)]
        if covering:
            record(EventKind.FIREWALL_EXISTING, f"may not create firewall rule {rule.name}; rule {covering[0]} lets the "
                                        "cluster's VMs reach each other")
            return
        raise SpecError(
            f"the firewall of network {network} lets the cluster's TPU VMs reach each other on no rule, and "
            f"podmanager may not create rule {rule.name}: {denied.message} (nothing was created)",
            hint=f"Ask whoever administers the network to create it: gcloud compute firewall-rules create {rule.name} "
                 f"--project {compute.project} --network {network} --direction INGRESS --allow tcp,udp,icmp "
                 f"--source-tags {cluster_tag(spec.name)} --target-tags {cluster_tag(spec.name)}") from None
    except cloud_errors.AlreadyExistsError:
        return  # made meanwhile (another `up` of the cluster)
    record(EventKind.FIREWALL_CREATED, f"firewall rule {rule.name} created: TCP, UDP and ICMP between the cluster's VMs "
                               f"(tag {cluster_tag(spec.name)}) in network {network}")


def _lets_in(rule: FirewallRule, ours: FirewallRule, subnetworks: list[Subnetwork]) -> bool:
    """Whether `rule` allows what `ours` would: every TCP and UDP port and ICMP, into the
    cluster's VMs, from the cluster's VMs (by their tag, or a range holding every subnetwork)."""
    if rule.disabled or rule.direction != "INGRESS":
        return False
    tag = ours.target_tags[0]
    if rule.target_tags and tag not in rule.target_tags:
        return False
    ranges = [ipaddress.ip_network(s.ip_cidr_range, strict=False) for s in subnetworks]
    from_cluster = tag in rule.source_tags or (bool(ranges) and all(
        any(_holds(source, inner) for source in rule.source_ranges) for inner in ranges))
    return from_cluster and all(_allows(rule.allowed, protocol) for protocol in ("tcp", "udp", "icmp"))


def _holds(source: str, inner: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    try:
        outer = ipaddress.ip_network(source, strict=False)
    except ValueError:
        return False
    return outer.version == inner.version and inner.subnet_of(outer)  # type: ignore[arg-type]


def _allows(allowed: list[Allowed], protocol: str) -> bool:
    for entry in allowed:
        if entry.protocol == "all":
            return True
        if entry.protocol == protocol and (protocol not in _EVERY_PORT or not entry.ports
                                          or "0-65535" in entry.ports or "1-65535" in entry.ports):
            return True
    return False
