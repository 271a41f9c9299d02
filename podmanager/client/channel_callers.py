"""The callers a cluster's controller admits, read (no change): its channel rule
(`pm-<cluster>-channel`, each caller one address), and what an unreachable controller's error
says about it. `channel_access.py` adds and revokes them."""

from __future__ import annotations

import json
from dataclasses import dataclass

from podmanager.client import pinned
from podmanager.cloud.gcp.compute import ComputeNetworks
from podmanager.cloud.gcp.controller_vm import admitted_callers, channel_rule_name
from podmanager.cloud.network import FirewallRule
from podmanager.cluster import backends
from podmanager.core.errors import ClusterNotFoundError, SpecError
from podmanager.core.network_names import network_project
from podmanager.core.spec import ClusterSpec, parse_spec


@dataclass(frozen=True)
class ChannelAccess:
    """The channel rule's callers after the verb; what it added or revoked."""

    cluster: str
    rule: str
    callers: list[str]
    added: str | None = None
    revoked: str | None = None


def controller_spec(name: str, *, project: str | None, dry_run: bool) -> ClusterSpec:
    """A spec that finds cluster `name`'s controller VM in its project (the rest is placeholder:
    the cluster's own spec is on the controller)."""
    if not dry_run and not project:
        raise SpecError("--project: a cluster on Google Cloud is found in its project; pass --project PROJECT "
                        "(or --dry-run for the simulated cloud)")
    placeholder = {"name": name, "slices": [{"accelerator": "v4-8"}], "controller": {"local": False}}
    return parse_spec({**placeholder, **({"project": project} if project else {})}, source="--cluster/--project",
                      dry_run=dry_run)


def networks_of(spec: ClusterSpec) -> ComputeNetworks:
    return backends.make_networks(spec)


def channel_rule_of(spec: ClusterSpec, networks: ComputeNetworks) -> FirewallRule:
    rule = networks.firewall(channel_rule_name(spec.name))
    if rule is None:
        raise ClusterNotFoundError(f"--cluster {spec.name}: project {spec.project} has no channel rule "
                                   f"{channel_rule_name(spec.name)} (no controller VM of that name?)",
                                   hint="Check the name and --project; 'podmanager up -f SPEC' creates both.")
    return rule


def access_callers(name: str, *, project: str | None = None, dry_run: bool = False) -> ChannelAccess:
    """The addresses the cluster's channel rule admits."""
    spec = controller_spec(name, project=project, dry_run=dry_run)
    with networks_of(spec) as networks:
        rule = channel_rule_of(spec, networks.in_project(network_project(spec)))
    return ChannelAccess(name, rule.name, admitted_callers(rule))


def unreachable_hint(cluster: str) -> str:
    """What an unreachable controller's error tells: its channel rule, the addresses it admits
    (read now, with this user's Compute permission) and the command that admits this machine
    again, for a laptop whose public address changed (another network, a VPN, a carrier's NAT)."""
    try:
        kept = json.loads(pinned.load_spec_json(cluster) or "{}")
    except ValueError:
        kept = {}
    kept = kept if isinstance(kept, dict) else {}
    dry_run, project = kept.get("backend") == "simulated", kept.get("project")
    flags = "--dry-run" if dry_run else f"--project {project}" if isinstance(project, str) else "--project PROJECT"
    try:
        admitted = ", ".join(access_callers(cluster, project=project if isinstance(project, str) else None,
                                            dry_run=dry_run).callers)
    except Exception:  # noqa: BLE001 - the hint of an error already being raised: what it cannot read, it says
        admitted = "addresses this machine could not read"
    return (f"Its firewall rule {channel_rule_name(cluster)} admits {admitted}. If this machine's public address "
            f"changed, 'podmanager access add -c {cluster} {flags}' admits it; else check that the controller is up.")
