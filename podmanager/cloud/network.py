"""A project's network as Compute Engine describes it, in the few fields the preflight reads:
networks, subnetworks (with Private Google Access), firewall rules and Cloud Routers (with
their Cloud NAT). The real client (`gcp/compute.py`) returns these records, and the simulated
project (`sim/compute.py`) keeps them as its state.

Names are short names (`default`), never the API's URLs: the client takes the last segment of
a URL the API returns."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

# What `nats[].sourceSubnetworkIpRangesToNat` says when a NAT serves every subnetwork of its region.
NAT_ALL_SUBNETWORKS = ("ALL_SUBNETWORKS_ALL_IP_RANGES", "ALL_SUBNETWORKS_ALL_PRIMARY_IP_RANGES")
NAT_LISTED_SUBNETWORKS = "LIST_OF_SUBNETWORKS"


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True)


class Network(_Record):
    name: str
    auto_create_subnetworks: bool = False  # auto mode: one subnetwork in every region


class Subnetwork(_Record):
    name: str
    region: str
    network: str
    ip_cidr_range: str
    private_ip_google_access: bool = False  # its VMs without external IPs reach Google's APIs


class Allowed(_Record):
    """One `allowed` (or `denied`) entry of a firewall rule: a protocol (tcp, udp, icmp, all, or
    a number) and its ports (none: all)."""

    protocol: str
    ports: list[str] = Field(default_factory=list)


class FirewallRule(_Record):
    name: str
    network: str
    direction: str = "INGRESS"
    priority: int = 1000
    source_ranges: list[str] = Field(default_factory=list)
    source_tags: list[str] = Field(default_factory=list)
    target_tags: list[str] = Field(default_factory=list)  # none: every instance of the network
    allowed: list[Allowed] = Field(default_factory=list)
    denied: list[Allowed] = Field(default_factory=list)  # a deny rule's; a rule has allowed or denied
    destination_ranges: list[str] = Field(default_factory=list)  # an EGRESS rule's; none: 0.0.0.0/0
    disabled: bool = False


class Nat(_Record):
    name: str
    source_subnetwork_ip_ranges_to_nat: str = NAT_ALL_SUBNETWORKS[0]
    subnetworks: list[str] = Field(default_factory=list)  # with LIST_OF_SUBNETWORKS: the ones it serves

    def serves(self, subnetwork: str) -> bool:
        return (self.source_subnetwork_ip_ranges_to_nat in NAT_ALL_SUBNETWORKS
                or (self.source_subnetwork_ip_ranges_to_nat == NAT_LISTED_SUBNETWORKS
                    and subnetwork in self.subnetworks))


class Router(_Record):
    name: str
    region: str
    network: str
    nats: list[Nat] = Field(default_factory=list)


def region_of(zone: str) -> str:
    """The region of a zone: us-central2-b -> us-central2 (and the simulated sim-zone-a -> sim-zone)."""
    return zone.rsplit("-", 1)[0]


def short_name(url_or_name: str) -> str:
    """`default` of https://www.googleapis.com/compute/v1/projects/P/global/networks/default (or of `default`)."""
    return url_or_name.rstrip("/").rsplit("/", 1)[-1]
