"""The project's VPC firewall rules as each VM's ordered rule set, with Google Cloud's
semantics (https://cloud.google.com/firewall/docs/firewalls); pure.

- A rule belongs to one network and applies to that network's VMs: all of them, or, with
  target tags, those carrying any of them ("Target tags", same page).
- An ingress rule's sources are its source ranges together with the primary internal addresses
  of the network's VMs carrying any of its source tags, "combined using a logical OR"; a rule
  with neither has the source range 0.0.0.0/0 ("Sources for ingress rules"). Source tags never
  match a VM's external address.
- An egress rule's destinations are its destination ranges, 0.0.0.0/0 when it has none
  ("Destinations for egress rules").
- Priorities run 0 (highest) to 65535 (lowest); the highest-priority rule that matches a packet
  decides; "A rule with a deny action overrides another rule with an allow action only if the
  two rules have the same priority" ("Priority order for firewall rules").
- Two implied rules that cannot be removed, at 65535: allow every egress, deny every ingress
  ("Implied rules"). A disabled rule counts for nothing.
- Rules are stateful: once a connection is allowed, its return traffic is too, whatever the
  rules of the other direction ("Specifications": connection tracking). `nft.py` renders that as
  conntrack's `established,related`; the evaluation here decides new connections only.

A new project's `default` network has four rules of its own at 65534 (default-allow-internal,
-ssh, -rdp, -icmp: https://cloud.google.com/vpc/docs/firewall-rules-overview and
`emulator/sim/compute.py`, which makes them): they are ordinary rules here, deletable as on Google.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network

from podmanager.cloud.network import FirewallRule
from podmanager.emulator.network.model import Host, Vpc

IMPLIED_PRIORITY = 65535
ANYWHERE = ipaddress.ip_network("0.0.0.0/0")
# The protocol names the API takes (besides a number, and "all"):
# https://cloud.google.com/firewall/docs/firewalls#protocols_and_ports
PROTOCOLS = {"icmp": 1, "ipip": 4, "tcp": 6, "udp": 17, "esp": 50, "ah": 51, "sctp": 132}
PORTED = {6, 17, 132}  # ports are allowed only with tcp, udp and sctp


class FirewallRuleError(ValueError):
    """A rule the API would refuse (an unknown protocol, a bad port or range)."""


@dataclass(frozen=True)
class Match:
    protocol: int | None  # None: every protocol ("all")
    ports: tuple[tuple[int, int], ...] = ()  # inclusive ranges; (): every port

    def covers(self, protocol: int, port: int | None) -> bool:
        if self.protocol is not None and self.protocol != protocol:
            return False
        return not self.ports or (port is not None and any(low <= port <= high for low, high in self.ports))


@dataclass(frozen=True)
class Rule:
    """One rule as it applies to one VM: its peers are resolved to address ranges (the sources
    of an ingress rule, the destinations of an egress rule)."""

    name: str
    priority: int
    allow: bool
    peers: tuple[IPv4Network, ...]
    matches: tuple[Match, ...]

    def covers(self, peer: IPv4Address, protocol: int, port: int | None) -> bool:
        return any(peer in net for net in self.peers) and any(m.covers(protocol, port) for m in self.matches)


IMPLIED_DENY_INGRESS = Rule(name="implied-deny-ingress", priority=IMPLIED_PRIORITY, allow=False,
                            peers=(ANYWHERE,), matches=(Match(None),))
IMPLIED_ALLOW_EGRESS = Rule(name="implied-allow-egress", priority=IMPLIED_PRIORITY, allow=True,
                            peers=(ANYWHERE,), matches=(Match(None),))


@dataclass(frozen=True)
class HostPolicy:
    """A VM's firewall: each direction's rules in the order they are evaluated, the first that
    covers a new connection deciding it (the implied rule last)."""

    host: str
    ingress: tuple[Rule, ...]
    egress: tuple[Rule, ...]


def protocol_number(name: str, rule: str = "") -> int | None:
    """6 for "tcp" or "6"; None for "all"."""
    lowered = name.lower()
    if lowered == "all":
        return None
    if lowered in PROTOCOLS:
        return PROTOCOLS[lowered]
    if lowered.isdigit() and 0 <= int(lowered) <= 255:
        return int(lowered)
    raise FirewallRuleError(f"firewall rule {rule!r}: IPProtocol {name!r} is not one of "
                            f"{', '.join(sorted(PROTOCOLS))}, all, or a number 0-255")


def _port_range(text: str, rule: str) -> tuple[int, int]:
    low, _, high = text.partition("-")
    try:
        found = (int(low), int(high or low))
    except ValueError:
        raise FirewallRuleError(f"firewall rule {rule!r}: port {text!r} is not a port or a range PORT-PORT") from None
    if not 0 <= found[0] <= found[1] <= 65535:
        raise FirewallRuleError(f"firewall rule {rule!r}: port range {text!r} is outside 0-65535")
    return found


def _matches(rule: FirewallRule) -> tuple[Match, ...]:
    made = []
    for entry in rule.allowed or rule.denied:
        protocol = protocol_number(entry.protocol, rule.name)
        if entry.ports and protocol not in PORTED:
            raise FirewallRuleError(f"firewall rule {rule.name!r}: ports are allowed only with tcp, udp or sctp "
                                    f"(got {entry.protocol} {entry.ports})")
        made.append(Match(protocol, tuple(_port_range(p, rule.name) for p in entry.ports)))
    return tuple(made)


def _ranges(texts: list[str], rule: str) -> list[IPv4Network]:
    try:
        return [ipaddress.IPv4Network(text, strict=False) for text in texts]
    except ValueError as bad:
        raise FirewallRuleError(f"firewall rule {rule!r}: {bad}") from None


def applies_to(rule: FirewallRule, host: Host) -> bool:
    return (not rule.disabled and rule.network == host.network
            and (not rule.target_tags or bool(set(rule.target_tags) & set(host.tags))))


def _sources(rule: FirewallRule, vpc: Vpc) -> tuple[IPv4Network, ...]:
    if not rule.source_ranges and not rule.source_tags:
        return (ANYWHERE,)
    tagged = [ipaddress.ip_network(h.internal_ip) for h in vpc.hosts_of(rule.network)
              if set(rule.source_tags) & set(h.tags)]
    return tuple(_ranges(rule.source_ranges, rule.name) + tagged)


def _order(rules: list[Rule]) -> tuple[Rule, ...]:
    # Lower number first; at one priority a deny before an allow, so the first match decides.
    return tuple(sorted(rules, key=lambda r: (r.priority, r.allow, r.name)))


def policy_for(vpc: Vpc, host: Host) -> HostPolicy:
    ingress, egress = [], []
    for rule in vpc.firewall_rules:
        if not applies_to(rule, host):
            continue
        if rule.direction == "EGRESS":
            peers = tuple(_ranges(rule.destination_ranges, rule.name)) or (ANYWHERE,)
            egress.append(Rule(rule.name, rule.priority, bool(rule.allowed), peers, _matches(rule)))
        else:
            ingress.append(Rule(rule.name, rule.priority, bool(rule.allowed), _sources(rule, vpc), _matches(rule)))
    return HostPolicy(host=host.key, ingress=_order(ingress) + (IMPLIED_DENY_INGRESS,),
                      egress=_order(egress) + (IMPLIED_ALLOW_EGRESS,))


def policies(vpc: Vpc) -> dict[str, HostPolicy]:
    """Every VM's firewall, by its key."""
    return {host.key: policy_for(vpc, host) for host in vpc.hosts}


def decide(rules: tuple[Rule, ...], peer: IPv4Address | str, protocol: str, port: int | None = None) -> Rule:
    """The rule that decides a new connection with `peer` (its source, for ingress rules)."""
    address, number = ipaddress.ip_address(peer), protocol_number(protocol)
    assert number is not None, "a packet has one protocol"
    return next(rule for rule in rules if rule.covers(address, number, port))
