"""The project's firewall rules as each VM's ordered rule set (`emulator/network/firewall.py`),
table-tested against Google Cloud's semantics (https://cloud.google.com/firewall/docs/firewalls),
and the nftables script that carries that order (`network/nft.py`). Pure: no machine needed."""

from __future__ import annotations

from ipaddress import ip_address

import pytest

from podmanager.cloud.network import Allowed, FirewallRule
from podmanager.emulator.network.firewall import FirewallRuleError, decide, policy_for
from podmanager.emulator.network.model import Host, Internet, Vpc
from podmanager.emulator.network.nft import vm_firewall
from podmanager.emulator.sim.compute import SimCompute
from podmanager.emulator.sim.records import ComputeState

TCP = [Allowed(protocol="tcp")]
WEB = Host(key="instance:z/web", network="default", region="r", subnet="default",
           internal_ip=ip_address("10.128.0.2"), tags=("web",),
           external_ip=ip_address("198.18.0.100"))
CALLER = Host(key="instance:z/caller", network="default", region="r", subnet="default",
              internal_ip=ip_address("10.128.0.3"), tags=("caller",),
              external_ip=ip_address("198.18.0.101"))


def new_project_rules() -> list[FirewallRule]:
    return list(SimCompute(ComputeState(), "p").state.firewalls.values())


def vpc(rules: list[FirewallRule]) -> Vpc:
    return Vpc(internet=Internet(0), networks=("default", "other"), subnets=(), hosts=(WEB, CALLER), nats=(),
               firewall_rules=tuple(rules))


def rule(name: str, **fields) -> FirewallRule:
    return FirewallRule(name=name, network=fields.pop("network", "default"), **fields)


# (rules, peer, protocol, port, the rule that decides a new connection into WEB)
INGRESS = {
    "a new project: the network's own range on any port": (new_project_rules(), "10.128.0.3", "tcp", 8080,
                                                           "default-allow-internal"),
    "a new project: ssh from anywhere": (new_project_rules(), "203.0.113.9", "tcp", 22, "default-allow-ssh"),
    "a new project: rdp from anywhere": (new_project_rules(), "203.0.113.9", "tcp", 3389, "default-allow-rdp"),
    "a new project: icmp from anywhere": (new_project_rules(), "203.0.113.9", "icmp", None, "default-allow-icmp"),
    "a new project: anything else from outside is denied": (new_project_rules(), "203.0.113.9", "tcp", 8080,
                                                            "implied-deny-ingress"),
    "no rule: ingress denied": ([], "10.128.0.3", "tcp", 22, "implied-deny-ingress"),
    "the lower number wins": ([rule("deny", priority=900, source_ranges=["0.0.0.0/0"], denied=TCP),
                               rule("allow", priority=1000, source_ranges=["0.0.0.0/0"], allowed=TCP)],
                              "10.128.0.3", "tcp", 80, "deny"),
    "an allow with the lower number wins over a deny": (
        [rule("deny", priority=1000, source_ranges=["0.0.0.0/0"], denied=TCP),
         rule("allow", priority=999, source_ranges=["0.0.0.0/0"], allowed=TCP)], "10.128.0.3", "tcp", 80, "allow"),
    "deny wins over allow at the same priority": (
        [rule("a-allow", priority=1000, source_ranges=["0.0.0.0/0"], allowed=TCP),
         rule("z-deny", priority=1000, source_ranges=["0.0.0.0/0"], denied=TCP)], "10.128.0.3", "tcp", 80, "z-deny"),
    "a source range admits its addresses only": ([rule("r", source_ranges=["10.128.0.0/30"], allowed=TCP)],
                                                "10.128.0.9", "tcp", 80, "implied-deny-ingress"),
    "no source at all: 0.0.0.0/0": ([rule("any", allowed=TCP)], "203.0.113.9", "tcp", 80, "any"),
    "a source tag admits the tagged VM's internal address": (
        [rule("tag", source_tags=["caller"], allowed=TCP)], "10.128.0.3", "tcp", 80, "tag"),
    "a source tag never admits the tagged VM's external address": (
        [rule("tag", source_tags=["caller"], allowed=TCP)], "198.18.0.101", "tcp", 80, "implied-deny-ingress"),
    "source tags and ranges are combined with OR": (
        [rule("both", source_tags=["caller"], source_ranges=["203.0.113.0/24"], allowed=TCP)],
        "203.0.113.9", "tcp", 80, "both"),
    "a source tag no VM carries admits no one": ([rule("nobody", source_tags=["absent"], allowed=TCP)],
                                                "10.128.0.3", "tcp", 80, "implied-deny-ingress"),
    "a target tag the VM carries": ([rule("t", target_tags=["web"], allowed=TCP)], "10.128.0.3", "tcp", 80, "t"),
    "a target tag the VM lacks": ([rule("t", target_tags=["db"], allowed=TCP)], "10.128.0.3", "tcp", 80,
                                  "implied-deny-ingress"),
    "another network's rule": ([rule("o", network="other", allowed=TCP)], "10.128.0.3", "tcp", 80,
                               "implied-deny-ingress"),
    "a disabled rule": ([rule("off", allowed=TCP, disabled=True)], "10.128.0.3", "tcp", 80, "implied-deny-ingress"),
    "a port outside the rule's": ([rule("p", allowed=[Allowed(protocol="tcp", ports=["22", "8000-8010"])])],
                                  "10.128.0.3", "tcp", 8011, "implied-deny-ingress"),
    "a port inside the rule's range": ([rule("p", allowed=[Allowed(protocol="tcp", ports=["22", "8000-8010"])])],
                                       "10.128.0.3", "tcp", 8010, "p"),
    "another protocol than the rule's": ([rule("u", allowed=[Allowed(protocol="udp")])], "10.128.0.3", "tcp", 80,
                                         "implied-deny-ingress"),
    "protocol all": ([rule("all", allowed=[Allowed(protocol="all")])], "10.128.0.3", "udp", 53, "all"),
    "a protocol by number": ([rule("six", allowed=[Allowed(protocol="6")])], "10.128.0.3", "tcp", 80, "six"),
    "an egress rule is not an ingress rule": ([rule("e", direction="EGRESS", allowed=TCP)], "10.128.0.3", "tcp", 80,
                                              "implied-deny-ingress"),
}


@pytest.mark.parametrize("rules, peer, protocol, port, decider", INGRESS.values(), ids=INGRESS.keys())
def test_ingress(rules, peer, protocol, port, decider):
    assert decide(policy_for(vpc(rules), WEB).ingress, peer, protocol, port).name == decider


EGRESS = {
    "no rule: egress allowed": ([], "203.0.113.9", "tcp", 443, "implied-allow-egress"),
    "a deny to a destination range": ([rule("no-out", direction="EGRESS", destination_ranges=["203.0.113.0/24"],
                                            denied=TCP)], "203.0.113.9", "tcp", 443, "no-out"),
    "outside the destination range": ([rule("no-out", direction="EGRESS", destination_ranges=["203.0.113.0/24"],
                                            denied=TCP)], "198.51.100.1", "tcp", 443, "implied-allow-egress"),
    "no destination: 0.0.0.0/0": ([rule("no-out", direction="EGRESS", denied=TCP)], "198.51.100.1", "tcp", 443,
                                  "no-out"),
    "an ingress rule is not an egress rule": ([rule("in", denied=TCP)], "198.51.100.1", "tcp", 443,
                                              "implied-allow-egress"),
}


@pytest.mark.parametrize("rules, peer, protocol, port, decider", EGRESS.values(), ids=EGRESS.keys())
def test_egress(rules, peer, protocol, port, decider):
    assert decide(policy_for(vpc(rules), WEB).egress, peer, protocol, port).name == decider


def test_the_implied_rules_come_last_at_65535():
    policy = policy_for(vpc([rule("last-but-one", priority=65535, allowed=TCP)]), WEB)
    assert [r.name for r in policy.ingress] == ["last-but-one", "implied-deny-ingress"]
    assert policy.ingress[-1].priority == policy.egress[-1].priority == 65535
    assert not policy.ingress[-1].allow and policy.egress[-1].allow


@pytest.mark.parametrize("entry, field", [
    (Allowed(protocol="tcpp"), "IPProtocol 'tcpp'"),
    (Allowed(protocol="icmp", ports=["1"]), "ports are allowed only with tcp, udp or sctp"),
    (Allowed(protocol="tcp", ports=["70000"]), "outside 0-65535"),
    (Allowed(protocol="tcp", ports=["http"]), "'http' is not a port"),
])
def test_a_rule_the_api_would_refuse_is_named(entry, field):
    with pytest.raises(FirewallRuleError, match=f"'bad'.*{field}"):
        policy_for(vpc([rule("bad", allowed=[entry])]), WEB)


def test_the_nftables_script_keeps_the_order_and_states_the_stateful_part():
    rules = [rule("z-allow", priority=1000, source_ranges=["10.128.0.0/9"], allowed=[Allowed(protocol="tcp",
                                                                                            ports=["22", "80-90"])]),
             rule("a-deny", priority=1000, source_tags=["caller"], denied=[Allowed(protocol="udp")]),
             rule("first", priority=10, allowed=[Allowed(protocol="icmp")])]
    script = vm_firewall(policy_for(vpc(rules), WEB))
    lines = [line.strip() for line in script.splitlines()]
    ingress = lines[lines.index("chain ingress {") + 1: lines.index("chain egress {")]
    assert ingress[0] == "type filter hook input priority filter; policy drop;"
    assert "ct state established,related accept" in ingress
    ordered = [line for line in ingress if "comment" in line]
    assert ordered == [
        'meta l4proto 1 accept comment "first priority 10"',
        'ip saddr { 10.128.0.3/32 } meta l4proto 17 drop comment "a-deny priority 1000"',
        'ip saddr { 10.128.0.0/9 } meta l4proto 6 th dport { 22, 80-90 } accept comment "z-allow priority 1000"',
        'drop comment "implied-deny-ingress priority 65535"',
    ]
    # The script replaces the whole table in one transaction.
    assert lines[:2] == ["table inet pm_firewall", "delete table inet pm_firewall"]
