"""The names podmanager gives a cluster's network objects: one place, since the TPU nodes
(provisioning), the controller VM (cloud) and the firewall rules (preflight) must agree."""

from __future__ import annotations

from podmanager.core.spec import ClusterSpec


def cluster_tag(cluster: str) -> str:
    """The network tag every VM of the cluster carries: what its firewall rule names."""
    return f"pm-{cluster}"


def cluster_firewall_rule(cluster: str) -> str:
    """The firewall rule `up` makes so the cluster's VMs reach each other on every port."""
    return f"pm-{cluster}-internal"


def network_project(spec: ClusterSpec) -> str:
    """The project the cluster's network is in: the spec's, or the one its path names (a Shared
    VPC's host project)."""
    named = spec.network.network if spec.network and spec.network.network else ""
    parts = named.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "projects" else spec.project or ""
