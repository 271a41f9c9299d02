"""The simulated project's VPC as its Compute records describe it: networks, their subnetworks
(ranges, Private Google Access, whether a Cloud NAT serves them), every VM's interface (network,
subnetwork, internal address, external address, tags) and the firewall rules. Pure: computed
from the records alone, so a test builds one without a machine, and `fabric.py` realizes it.

Addresses: an instance keeps the internal address the simulated Compute API gave it; a TPU
worker keeps its endpoint when it lies in its subnetwork, else gets the next free one. An
external address (a VM with an access config) and a Cloud NAT's address come from the
"internet" segment. `earlier` (the model last built) keeps every address a VM already has, as
Google keeps a VM's addresses while it exists.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Network
from typing import Iterable

from podmanager.cloud.network import FirewallRule, region_of, short_name
from podmanager.emulator.sim.records import ComputeState, NodeRecord

# Every simulated "public" address lies in 198.18.0.0/15, the range RFC 2544 sets aside for
# benchmarking: never routed on the real internet, so nothing here can reach a real host.
# Slot k: the internet segment 198.18.k.0/24, the laptop's home LAN 198.19.k.0/24.
PUBLIC_POOL = ipaddress.ip_network("198.18.0.0/15")
SLOTS = 256


class NetworkModelError(ValueError):
    """The records describe a VM the simulated network cannot place (no such subnetwork, no free address)."""


@dataclass(frozen=True)
class Internet:
    """The "internet" segment of one emulator and the laptop's home LAN, by slot."""

    slot: int

    @property
    def cidr(self) -> IPv4Network:
        return ipaddress.ip_network(f"198.18.{self.slot}.0/24")

    @property
    def home_lan(self) -> IPv4Network:
        return ipaddress.ip_network(f"198.19.{self.slot}.0/24")

    def _at(self, offset: int) -> IPv4Address:
        return self.cidr.network_address + offset

    @property
    def laptop_public(self) -> IPv4Address:
        """The home router's public address: whom the controller sees when the laptop calls."""
        return self._at(1)

    @property
    def second_laptop(self) -> IPv4Address:
        return self._at(2)

    def laptop_moves(self) -> list[IPv4Address]:
        """The public addresses the laptop's home router may get instead (its provider gave it
        another, or the laptop joined another network): .5 to .9."""
        return [self._at(offset) for offset in range(5, 10)]

    @property
    def package_index(self) -> IPv4Address:
        return self._at(3)

    @property
    def google_apis(self) -> IPv4Address:
        return self._at(4)

    def edge_pool(self) -> list[IPv4Address]:
        """Where each network's edge (its router) gets its own public address: .10 to .99."""
        return [self._at(offset) for offset in range(10, 100)]

    @property
    def laptop_lan(self) -> IPv4Address:
        """The laptop's own address on its home LAN: never seen past the home router."""
        return self.home_lan.network_address + 2

    @property
    def home_router_lan(self) -> IPv4Address:
        return self.home_lan.network_address + 1

    def external_pool(self) -> list[IPv4Address]:
        """Where external and Cloud NAT addresses come from: .100 to .254."""
        return [self._at(offset) for offset in range(100, 255)]


@dataclass(frozen=True)
class Subnet:
    network: str
    region: str
    name: str
    cidr: IPv4Network
    private_google_access: bool
    cloud_nat: bool  # a Cloud NAT of its region and network serves it

    @property
    def gateway(self) -> IPv4Address:
        # The subnet's second address is its default gateway:
        # https://cloud.google.com/vpc/docs/subnets#unusable-ip-addresses-in-every-subnet
        return self.cidr.network_address + 1

    @property
    def key(self) -> str:
        return f"{self.region}/{self.name}"


@dataclass(frozen=True)
class Host:
    """One simulated VM's network interface."""

    key: str  # "instance:ZONE/NAME" or "tpu:ZONE/NODE/WORKER"
    network: str
    region: str
    subnet: str  # the subnetwork's name in `region`
    internal_ip: IPv4Address
    external_ip: IPv4Address | None  # None: no access config
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class CloudNat:
    """A Cloud Router's NAT: one public address for the subnetworks it serves."""

    key: str  # "nat:REGION/ROUTER"
    network: str
    region: str
    address: IPv4Address


@dataclass(frozen=True)
class Vpc:
    internet: Internet
    networks: tuple[str, ...]  # in the order the project made them: a network's index is its place here
    subnets: tuple[Subnet, ...]
    hosts: tuple[Host, ...]
    nats: tuple[CloudNat, ...]
    firewall_rules: tuple[FirewallRule, ...]
    edges: tuple[tuple[str, IPv4Address], ...] = ()  # (network, its edge's public address)
    _by_key: dict[str, Host] = field(default_factory=dict, compare=False, repr=False)

    def host(self, key: str) -> Host:
        if not self._by_key:
            self._by_key.update({h.key: h for h in self.hosts})
        return self._by_key[key]

    def edge(self, network: str) -> IPv4Address:
        return dict(self.edges)[network]

    def subnets_of(self, network: str) -> list[Subnet]:
        return [s for s in self.subnets if s.network == network]

    def hosts_of(self, network: str) -> list[Host]:
        return [h for h in self.hosts if h.network == network]

    def subnet_of(self, host: Host) -> Subnet:
        return next(s for s in self.subnets if (s.network, s.region, s.name) == (host.network, host.region, host.subnet))


def _subnets(compute: ComputeState) -> list[Subnet]:
    made = []
    for subnetwork in compute.subnetworks.values():
        nat = any(router.network == subnetwork.network and router.region == subnetwork.region
                  and any(n.serves(subnetwork.name) for n in router.nats) for router in compute.routers.values())
        made.append(Subnet(network=subnetwork.network, region=subnetwork.region, name=subnetwork.name,
                           cidr=ipaddress.ip_network(subnetwork.ip_cidr_range), cloud_nat=nat,
                           private_google_access=subnetwork.private_ip_google_access))
    return made


def _find_subnet(subnets: list[Subnet], compute: ComputeState, network: str, region: str, subnetwork: str,
                 who: str) -> Subnet:
    if network not in compute.networks:
        raise NetworkModelError(f"{who}: network {network!r} does not exist")
    name = subnetwork or (network if compute.networks[network].auto_create_subnetworks else "")
    found = next((s for s in subnets if (s.network, s.region, s.name) == (network, region, name)), None)
    if found is None:
        raise NetworkModelError(f"{who}: network {network!r} has no subnetwork {name!r} in region {region} "
                                "(an auto-mode network's is made when the region is first asked about)")
    return found


def _free_internal(subnet: Subnet, taken: set[IPv4Address], who: str) -> IPv4Address:
    # The first two and the last two addresses of a range are Google's:
    # https://cloud.google.com/vpc/docs/subnets#unusable-ip-addresses-in-every-subnet
    first, last = int(subnet.cidr.network_address) + 2, int(subnet.cidr.broadcast_address) - 2
    for value in range(first, last + 1):
        if IPv4Address(value) not in taken:
            return IPv4Address(value)
    raise NetworkModelError(f"{who}: subnetwork {subnet.key} ({subnet.cidr}) has no free address")


def build_vpc(compute: ComputeState, nodes: Iterable[NodeRecord], internet: Internet,
              earlier: Vpc | None = None) -> Vpc:
    """The VPC the records describe: every network, subnetwork and firewall rule, every
    instance not being deleted and every worker of every TPU node not being deleted."""
    subnets = _subnets(compute)
    before = {h.key: h for h in earlier.hosts} if earlier else {}
    nats_before = {n.key: n for n in earlier.nats} if earlier else {}
    public_taken = {h.external_ip for h in before.values() if h.external_ip} | {n.address for n in nats_before.values()}
    internal_taken: set[IPv4Address] = set()
    placed: list[tuple[str, Subnet, IPv4Address | None, bool, tuple[str, ...]]] = []

    for record in compute.instances.values():
        if record.gone_at is not None:
            continue
        instance = record.instance
        key = f"instance:{instance.zone}/{instance.name}"
        subnet = _find_subnet(subnets, compute, instance.network, region_of(instance.zone), instance.subnetwork, key)
        ip = ipaddress.ip_address(instance.internal_ip) if instance.internal_ip else None
        internal_taken.update([ip] if ip else [])
        placed.append((key, subnet, ip, instance.external_ip, tuple(instance.tags)))
    for node in nodes:
        if node.gone_at is not None:
            continue
        asked = node.network
        network = short_name(asked.network) if asked and asked.network else "default"
        for worker, endpoint in enumerate(node.endpoints):
            key = f"tpu:{node.zone}/{node.name}/{worker}"
            subnet = _find_subnet(subnets, compute, network, region_of(node.zone),
                                  short_name(asked.subnetwork) if asked and asked.subnetwork else "", key)
            ip = ipaddress.ip_address(endpoint)
            kept = before.get(key)
            ip = ip if ip in subnet.cidr else kept.internal_ip if kept and kept.internal_ip in subnet.cidr else None
            internal_taken.update([ip] if ip else [])
            placed.append((key, subnet, ip, bool(asked and asked.enable_external_ips), tuple(asked.tags if asked else ())))

    pool = internet.external_pool()

    def public(key: str, kept: IPv4Address | None) -> IPv4Address:
        if kept is not None:
            return kept
        free = next((a for a in pool if a not in public_taken), None)
        if free is None:
            raise NetworkModelError(f"{key}: the simulated internet has no free external address ({len(pool)} in use)")
        public_taken.add(free)
        return free

    hosts = []
    for key, subnet, ip, external, tags in placed:
        if ip is None:
            ip = _free_internal(subnet, internal_taken, key)
            internal_taken.add(ip)
        kept = before.get(key)
        external_ip = public(key, kept.external_ip if kept else None) if external else None
        hosts.append(Host(key=key, network=subnet.network, region=subnet.region, subnet=subnet.name,
                          internal_ip=ip, external_ip=external_ip, tags=tags))

    nats = []
    for router in compute.routers.values():
        if router.nats:
            key = f"nat:{router.region}/{router.name}"
            kept_nat = nats_before.get(key)
            nats.append(CloudNat(key=key, network=router.network, region=router.region,
                                 address=public(key, kept_nat.address if kept_nat else None)))
    edges_before = dict(earlier.edges) if earlier else {}
    edge_pool = [a for a in internet.edge_pool() if a not in edges_before.values()]
    edges = []
    for network in compute.networks:
        if network not in edges_before and not edge_pool:
            raise NetworkModelError(f"network {network!r}: at most {len(internet.edge_pool())} networks are simulated")
        edges.append((network, edges_before.get(network) or edge_pool.pop(0)))
    return Vpc(internet=internet, networks=tuple(compute.networks), subnets=tuple(subnets), hosts=tuple(hosts),
               nats=tuple(nats), firewall_rules=tuple(compute.firewalls.values()), edges=tuple(edges))
