"""nftables scripts for the simulated network (pure text; `fabric.py` hands them to `nft -f -`
inside a namespace). Each script replaces its table in one transaction (declare, delete,
define), so a firewall change takes effect at once, with no moment without rules, and leaves
tracked connections alone.

- `vm_firewall`: a VM's firewall (`firewall.py`'s ordered rules) in its own namespace.
- `edge`: a network's edge to the internet: one-to-one NAT for external addresses, Cloud NAT,
  Private Google Access, and nothing else out (https://cloud.google.com/vpc/docs/vpc#internet_access_reqs).
- `home_router`: the laptop's home router: its LAN masqueraded behind one public address.
"""

from __future__ import annotations

from ipaddress import IPv4Address
from typing import Iterable

from podmanager.emulator.network.firewall import ANYWHERE, HostPolicy, Match, Rule
from podmanager.emulator.network.model import Internet, Vpc

FIREWALL_TABLE = "pm_firewall"
EDGE_TABLE = "pm_edge"
HOME_TABLE = "pm_home"
# Interface names inside the namespaces (each namespace has its own names).
VM_LINK = "eth0"
VPC_BRIDGE = "vpc"
WAN_LINK = "wan"
LAN_LINK = "lan"


def _set(items: Iterable[object]) -> str:
    return "{ " + ", ".join(str(i) for i in items) + " }"


def _replace(family: str, table: str, body: str) -> str:
    return f"table {family} {table}\ndelete table {family} {table}\ntable {family} {table} {{\n{body}}}\n"


def _match_line(peer_field: str, rule: Rule, match: Match) -> str:
    parts = []
    if ANYWHERE not in rule.peers:
        parts.append(f"ip {peer_field} {_set(rule.peers)}")
    if match.protocol is not None:
        parts.append(f"meta l4proto {match.protocol}")
    if match.ports:
        parts.append("th dport " + _set(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in match.ports))
    parts.append("accept" if rule.allow else "drop")
    parts.append(f'comment "{rule.name} priority {rule.priority}"')
    return "    " + " ".join(parts) + "\n"


def _rule_lines(peer_field: str, rules: tuple[Rule, ...]) -> str:
    # A rule whose source tags match no VM has no peers: it matches nothing.
    return "".join(_match_line(peer_field, rule, match) for rule in rules if rule.peers for match in rule.matches)


def vm_firewall(policy: HostPolicy) -> str:
    """The VM's firewall: tracked connections' packets pass both ways (the rules are stateful),
    new ones meet the rules in order, the implied ones last. Traffic inside the VM (lo) is not
    the VPC's. The VPC is IPv4 only here: anything else is dropped."""
    body = (
        "  chain ingress {\n    type filter hook input priority filter; policy drop;\n"
        '    iifname "lo" accept\n    meta nfproto != ipv4 drop\n'
        "    ct state established,related accept\n    ct state invalid drop\n"
        + _rule_lines("saddr", policy.ingress) + "  }\n"
        "  chain egress {\n    type filter hook output priority filter; policy accept;\n"
        '    oifname "lo" accept\n    meta nfproto != ipv4 drop\n'
        "    ct state established,related accept\n    ct state invalid drop\n"
        + _rule_lines("daddr", policy.egress) + "  }\n")
    return _replace("inet", FIREWALL_TABLE, body)


def edge(vpc: Vpc, network: str) -> str:
    """Network `network`'s edge: the VPC routes between its own subnetworks; a VM with an
    external address reaches the internet and is reached at it (one-to-one NAT: the VM's
    firewall sees the caller's public address); a VM without one reaches the internet only
    through a Cloud NAT serving its subnetwork
    (https://cloud.google.com/nat/docs/overview), and Google's APIs also through Private Google
    Access on its subnetwork (https://cloud.google.com/vpc/docs/private-google-access), which
    Google applies before Cloud NAT for that traffic."""
    external = {h.internal_ip: h.external_ip for h in vpc.hosts_of(network) if h.external_ip}
    edge_address = vpc.edge(network)
    pga = sorted({s.cidr for s in vpc.subnets_of(network) if s.private_google_access}, key=str)
    nat_rules, nat_forward = "", ""
    for nat in (n for n in vpc.nats if n.network == network):
        served = sorted({s.cidr for s in vpc.subnets_of(network) if s.region == nat.region and s.cloud_nat}, key=str)
        if served:
            nat_rules += f'    oifname "{WAN_LINK}" ip saddr {_set(served)} snat to {nat.address} comment "{nat.key}"\n'
            nat_forward += f'    iifname "{VPC_BRIDGE}" oifname "{WAN_LINK}" ip saddr {_set(served)} accept\n'
    one_to_one_in = one_to_one_out = forward_out = ""
    if external:
        pairs_in = _set(f"{e} : {i}" for i, e in external.items())
        pairs_out = _set(f"{i} : {e}" for i, e in external.items())
        one_to_one_in = f'    iifname "{WAN_LINK}" dnat to ip daddr map {pairs_in}\n'
        one_to_one_out = f'    oifname "{WAN_LINK}" snat to ip saddr map {pairs_out}\n'
        forward_out = f'    iifname "{VPC_BRIDGE}" oifname "{WAN_LINK}" ip saddr {_set(external)} accept\n'
    pga_out = pga_forward = ""
    if pga:
        google = vpc.internet.google_apis
        pga_out = f'    oifname "{WAN_LINK}" ip daddr {google} ip saddr {_set(pga)} snat to {edge_address}\n'
        pga_forward = f'    iifname "{VPC_BRIDGE}" oifname "{WAN_LINK}" ip daddr {google} ip saddr {_set(pga)} accept\n'
    body = (
        "  chain prerouting {\n    type nat hook prerouting priority dstnat; policy accept;\n"
        + one_to_one_in + "  }\n"
        "  chain postrouting {\n    type nat hook postrouting priority srcnat; policy accept;\n"
        + one_to_one_out + pga_out + nat_rules + "  }\n"
        "  chain forward {\n    type filter hook forward priority filter; policy drop;\n"
        "    ct state established,related accept\n"
        f'    iifname "{VPC_BRIDGE}" oifname "{VPC_BRIDGE}" accept\n'
        f'    iifname "{WAN_LINK}" oifname "{VPC_BRIDGE}" ct status dnat accept\n'
        + forward_out + pga_forward + nat_forward + "  }\n")
    return _replace("ip", EDGE_TABLE, body)


def home_router(internet: Internet, public: IPv4Address) -> str:
    """A home router: the LAN goes out behind its one public address, `public`; nothing comes
    in unasked (no port forwarding). Connections made behind an address it had before
    (`Fabric.move_laptop`) go dead, both ways, as they do when a real NAT's address changes."""
    earlier = [a for a in [internet.laptop_public, *internet.laptop_moves()] if a != public]
    body = (
        "  chain postrouting {\n    type nat hook postrouting priority srcnat; policy accept;\n"
        f'    oifname "{WAN_LINK}" ip saddr {internet.home_lan} snat to {public}\n  }}\n'
        "  chain forward {\n    type filter hook forward priority filter; policy drop;\n"
        f"    ct reply ip daddr {_set(earlier)} drop\n"
        "    ct state established,related accept\n"
        f'    iifname "{LAN_LINK}" oifname "{WAN_LINK}" accept\n  }}\n')
    return _replace("ip", HOME_TABLE, body)
