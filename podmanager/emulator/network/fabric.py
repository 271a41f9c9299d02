"""The simulated VPC made real on Linux as root, with iproute2 (`ip`) and nftables (`nft`).

    machine's namespace (the laptop) --PREFIXl/lan-- PREFIX-home (home router, NAT) --wan--+
    PREFIX-laptop2 --eth0-----------------------------------------------------------------+-- PREFIX-inet
    PREFIX-net-<network> (the network's router and edge: bridge `vpc`, subnet gateways) --wan--+   (bridge br0: "the internet")
        `vpc` bridge --eth0-- PREFIX-vm-<host> (one per VM: its internal address, its firewall)

One namespace per VM, per network (its bridge holds every subnetwork's gateway and routes
between them; its `wan` leg holds the edge's, the external and the Cloud NAT addresses), one for
the internet segment, one for the laptop's home router and one for a second laptop. The
machine's own namespace gets one link, to the home router, and a route to the internet segment
through it. Every name carries the emulator's prefix (`names.py`): `down`, and a failure or a
Ctrl-C part-way, remove everything through `cleanup_leftovers`; a fabric whose process died is
removed by the next one started on the machine (`names.cleanup_orphans`).

nftables through the `nft` binary (Debian's `nftables` package), not pyroute2's NFTables: `nft
-f` replaces a table in one kernel transaction from a readable script, its syntax is nftables'
documented one, and pyroute2's NFTables is a prototype whose port matches are built by hand.
"""

from __future__ import annotations

import fcntl
import hashlib
import ipaddress
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Interface, IPv4Network
from pathlib import Path
from typing import Iterator

from podmanager.emulator.network import names, nft
from podmanager.emulator.network.firewall import policy_for
from podmanager.emulator.network.model import PUBLIC_POOL, SLOTS, Host, Internet, Vpc
from podmanager.emulator.network.sockets import inside

# Claiming an internet slot (a route in the machine's namespace) is one emulator at a time.
SLOT_LOCK = Path("/run/lock" if Path("/run/lock").is_dir() else "/tmp") / "podmanager-network.lock"
INTERNET_BRIDGE = "br0"
ROUTER_SYSCTLS = {
    "net/ipv4/ip_forward": "1",
    # The VPC routes between subnetworks on one bridge: no redirects to the other subnet.
    "net/ipv4/conf/all/send_redirects": "0",
    "net/ipv4/conf/default/send_redirects": "0",
}
# Bridged frames must not meet this namespace's own nftables (the edge's forward chain): the
# machine may have br_netfilter loaded, whose switches are per namespace.
BRIDGE_SYSCTLS = {f"net/bridge/bridge-nf-call-{t}": "0" for t in ("iptables", "ip6tables", "arptables")}
IPV4_ONLY = {"net/ipv6/conf/all/disable_ipv6": "1", "net/ipv6/conf/default/disable_ipv6": "1"}


def _short(text: str, length: int = 8) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:length]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[:40] + "-" + _short(text, 6)


def _sysctl(namespace: str, values: dict[str, str]) -> None:
    # /proc/sys/net is the namespace of the thread that opens it.
    with inside(namespace):
        for key, value in values.items():
            path = Path("/proc/sys") / key
            if path.exists():
                path.write_text(value)


def _ip_batch(namespace: str | None, commands: list[str]) -> None:
    where = ("-n", namespace) if namespace else ()
    names.run("ip", *where, "-batch", "-", stdin="\n".join(commands) + "\n")


def _nft(namespace: str, script: str) -> None:
    names.run("ip", "netns", "exec", namespace, "nft", "-f", "-", stdin=script)


@contextmanager
def _slot_lock() -> Iterator[None]:
    with open(SLOT_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _routed() -> list[IPv4Network]:
    found = []
    for line in names.run("ip", "-4", "-o", "route", "show", "table", "all").splitlines():
        words = line.split()
        words = words[1:] if words and words[0] in ("local", "broadcast", "unicast") else words
        if words and words[0] not in ("default",):
            try:
                found.append(ipaddress.IPv4Network(words[0], strict=False))
            except ValueError:
                continue
    return [n for n in found if n.overlaps(PUBLIC_POOL)]


def _free_slot() -> int:
    routed = _routed()
    for slot in range(SLOTS):
        internet = Internet(slot)
        if not any(n.overlaps(internet.cidr) or n.overlaps(internet.home_lan) for n in routed):
            return slot
    raise RuntimeError(f"every one of the {SLOTS} simulated internets in {PUBLIC_POOL} is in use on this machine "
                       "(see `ip -4 route`; leftovers of a crashed emulator go with `podmanager down`)")


@dataclass
class _NetworkMade:
    namespace: str
    gateways: set[IPv4Interface] = field(default_factory=set)  # on the `vpc` bridge
    public: set[IPv4Interface] = field(default_factory=set)  # on `wan`
    edge_script: str = ""


class Fabric:
    """One emulator's simulated network. `start` makes the internet, the laptop's home router
    and the second laptop and says which internet it is (build the `Vpc` for it); `sync` makes
    the namespaces, links and rules match a `Vpc` (a firewall rule's change takes effect at
    once); `down` removes everything. A failure part-way removes everything too, and raises."""

    def __init__(self, prefix: str):
        self.prefix = names.checked(prefix)
        self.internet: Internet | None = None
        self.laptop_public: IPv4Address | None = None  # the home router's address now (`move_laptop`)
        self._networks: dict[str, _NetworkMade] = {}
        self._hosts: dict[str, Host] = {}
        self._firewalls: dict[str, str] = {}  # host key -> the script it has

    def __enter__(self) -> Fabric:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    # ------------------------------------------------------------------ names

    def namespace(self, what: str) -> str:
        return names.namespace(self.prefix, what)

    @property
    def internet_namespace(self) -> str:
        return self.namespace("inet")

    @property
    def home_namespace(self) -> str:
        return self.namespace("home")

    @property
    def second_laptop_namespace(self) -> str:
        return self.namespace("laptop2")

    def network_namespace(self, network: str) -> str:
        return self.namespace(f"net-{_slug(network)}")

    def host_namespace(self, host_key: str) -> str:
        return self.namespace(f"vm-{_slug(host_key)}")

    # ------------------------------------------------------------------ the outside

    def start(self) -> Internet:
        if self.internet is not None:
            return self.internet
        try:
            with _slot_lock():
                names.cleanup_orphans()  # what crashed emulators and killed tests left, and its slots
                names.claim(self.prefix)
                internet = Internet(_free_slot())
                self._make_outside(internet)
        except BaseException:
            self.down()
            raise
        self.internet = internet
        return internet

    def _add_namespace(self, namespace: str, sysctls: dict[str, str]) -> None:
        names.run("ip", "netns", "add", namespace)
        _sysctl(namespace, {**IPV4_ONLY, **sysctls})
        _ip_batch(namespace, ["link set lo up"])

    def _plug_into_internet(self, namespace: str, inner: str, port: str) -> None:
        names.run("ip", "link", "add", inner, "netns", namespace, "type", "veth",
                  "peer", "name", port, "netns", self.internet_namespace)
        _ip_batch(self.internet_namespace, [f"link set {port} master {INTERNET_BRIDGE}", f"link set {port} up"])

    def _make_outside(self, internet: Internet) -> None:
        self._add_namespace(self.internet_namespace, BRIDGE_SYSCTLS)
        _ip_batch(self.internet_namespace, [f"link add {INTERNET_BRIDGE} type bridge", f"link set {INTERNET_BRIDGE} up"])
        # The laptop's home router: its WAN on the internet, its LAN a link to this machine.
        home, lan_prefix = self.home_namespace, internet.home_lan.prefixlen
        self._add_namespace(home, {"net/ipv4/ip_forward": "1"})
        self._plug_into_internet(home, nft.WAN_LINK, "home")
        root = names.root_link(self.prefix)
        names.run("ip", "link", "add", root, "type", "veth", "peer", "name", nft.LAN_LINK, "netns", home)
        _ip_batch(home, [f"addr add {internet.laptop_public}/{internet.cidr.prefixlen} dev {nft.WAN_LINK}",
                         f"link set {nft.WAN_LINK} up",
                         f"addr add {internet.home_router_lan}/{lan_prefix} dev {nft.LAN_LINK}",
                         f"link set {nft.LAN_LINK} up"])
        _nft(home, nft.home_router(internet, internet.laptop_public))
        self.laptop_public = internet.laptop_public
        _ip_batch(None, [f"addr add {internet.laptop_lan}/{lan_prefix} dev {root}", f"link set {root} up",
                         f"route add {internet.cidr} via {internet.home_router_lan} dev {root}"])
        # A second laptop, straight on the internet with a public address of its own.
        laptop2 = self.second_laptop_namespace
        self._add_namespace(laptop2, {})
        self._plug_into_internet(laptop2, "eth0", "laptop2")
        _ip_batch(laptop2, [f"addr add {internet.second_laptop}/{internet.cidr.prefixlen} dev eth0",
                            "link set eth0 up"])

    def move_laptop(self) -> IPv4Address:
        """The laptop's home router gets another public address (its provider changed it, or the
        laptop joined another network): its next of `Internet.laptop_moves`, returned. Its
        connections made behind the old one stall, as a real NAT's do when its address goes."""
        if self.internet is None or self.laptop_public is None:
            raise ValueError("start the fabric first")
        moves = self.internet.laptop_moves()
        old = self.laptop_public
        new = moves[(moves.index(old) + 1) % len(moves)] if old in moves else moves[0]
        segment = self.internet.cidr.prefixlen
        # The old one goes first: deleting a link's primary address deletes its secondaries too.
        _ip_batch(self.home_namespace, [f"addr del {old}/{segment} dev {nft.WAN_LINK}",
                                        f"addr add {new}/{segment} dev {nft.WAN_LINK}"])
        _nft(self.home_namespace, nft.home_router(self.internet, new))
        self.laptop_public = new
        return new

    # ------------------------------------------------------------------ the VPC

    def sync(self, vpc: Vpc) -> None:
        if self.internet is None or vpc.internet != self.internet:
            raise ValueError(f"the Vpc is built for {vpc.internet}, this fabric holds {self.internet} (start it first)")
        try:
            self._sync(vpc)
        except BaseException:
            self.down()
            raise

    def _sync(self, vpc: Vpc) -> None:
        wanted = {h.key: h for h in vpc.hosts}
        for key in [k for k, h in self._hosts.items() if wanted.get(k) != h or h.network not in vpc.networks]:
            names.run("ip", "netns", "delete", self.host_namespace(key))
            del self._hosts[key]
            self._firewalls.pop(key, None)
        for network in [n for n in self._networks if n not in vpc.networks]:
            names.run("ip", "netns", "delete", self._networks.pop(network).namespace)
        for network in vpc.networks:
            self._sync_network(vpc, network)
        for key, host in wanted.items():
            if key not in self._hosts:
                self._make_host(host, vpc)
            script = nft.vm_firewall(policy_for(vpc, host))
            if self._firewalls.get(key) != script:
                _nft(self.host_namespace(key), script)
                self._firewalls[key] = script

    def _sync_network(self, vpc: Vpc, network: str) -> None:
        made = self._networks.get(network)
        if made is None:
            namespace = self.network_namespace(network)
            self._add_namespace(namespace, {**ROUTER_SYSCTLS, **BRIDGE_SYSCTLS})
            made = self._networks[network] = _NetworkMade(namespace)
            _ip_batch(namespace, [f"link add {nft.VPC_BRIDGE} type bridge", f"link set {nft.VPC_BRIDGE} up"])
            self._plug_into_internet(namespace, nft.WAN_LINK, "n" + _short(network))
            _ip_batch(namespace, [f"link set {nft.WAN_LINK} up"])
        gateways = {IPv4Interface(f"{s.gateway}/{s.cidr.prefixlen}") for s in vpc.subnets_of(network)}
        segment = vpc.internet.cidr.prefixlen
        public = ({IPv4Interface(f"{vpc.edge(network)}/{segment}")}
                  | {IPv4Interface(h.external_ip) for h in vpc.hosts_of(network) if h.external_ip}
                  | {IPv4Interface(n.address) for n in vpc.nats if n.network == network})
        commands = ([f"addr del {a} dev {nft.VPC_BRIDGE}" for a in made.gateways - gateways]
                    + [f"addr add {a} dev {nft.VPC_BRIDGE}" for a in gateways - made.gateways]
                    + [f"addr del {a} dev {nft.WAN_LINK}" for a in made.public - public]
                    + [f"addr add {a} dev {nft.WAN_LINK}" for a in public - made.public])
        if commands:
            _ip_batch(made.namespace, commands)
        made.gateways, made.public = gateways, public
        script = nft.edge(vpc, network)
        if script != made.edge_script:
            _nft(made.namespace, script)
            made.edge_script = script

    def _make_host(self, host: Host, vpc: Vpc) -> None:
        namespace, subnet = self.host_namespace(host.key), vpc.subnet_of(host)
        router, port = self._networks[host.network].namespace, "v" + _short(host.key)
        self._add_namespace(namespace, {})
        self._hosts[host.key] = host  # from here on, a sync or down removes it
        names.run("ip", "link", "add", nft.VM_LINK, "netns", namespace, "type", "veth",
                  "peer", "name", port, "netns", router)
        _ip_batch(router, [f"link set {port} master {nft.VPC_BRIDGE}", f"link set {port} up"])
        _ip_batch(namespace, [f"addr add {host.internal_ip}/{subnet.cidr.prefixlen} dev {nft.VM_LINK}",
                              f"link set {nft.VM_LINK} up", f"route add default via {subnet.gateway}"])

    # ------------------------------------------------------------------ the end

    def down(self) -> list[str]:
        """Remove everything of this prefix (also what an earlier, crashed process made)."""
        removed = names.cleanup_leftovers(self.prefix)
        names.release(self.prefix)
        self.internet = None
        self.laptop_public = None
        self._networks.clear()
        self._hosts.clear()
        self._firewalls.clear()
        return removed
