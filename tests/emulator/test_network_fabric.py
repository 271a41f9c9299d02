"""The simulated network made real (`emulator/network/fabric.py`), proved with real sockets:
Google Cloud's firewall enforced in each VM's namespace, changed live, stateful; the laptop
behind its home router's NAT; a VM without an external address out only through Cloud NAT;
nothing left after `down`, a failure part-way, or a killed process.

Linux as root only (CI is). Servers bind only to addresses inside this test's namespaces and
every connection stays between them (the machine's own namespace reaches only its simulated
internet, 198.18.k.0/24, through its own link)."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from ipaddress import IPv4Address

import pytest

from podmanager.cloud.instances import Instance
from podmanager.cloud.network import Allowed, FirewallRule, Nat, Router, region_of
from podmanager.emulator.network import fabric as fabric_module
from podmanager.emulator.network import names
from podmanager.emulator.network.fabric import Fabric
from podmanager.emulator.network.model import Vpc, build_vpc
from podmanager.emulator.network.sockets import socket_in
from podmanager.emulator.sim.compute import SimCompute
from podmanager.emulator.sim.instances import MACHINE_TYPES, SimInstances
from podmanager.emulator.sim.records import ComputeState

pytestmark = [pytest.mark.processes,
              pytest.mark.skipif(names.unavailable() is not None, reason=f"{names.unavailable()}")]

ZONE = next(iter(MACHINE_TYPES))
PORT = 8080
DENIED_WITHIN_S = 1.0  # a dropped SYN: the connection has not come up in this long
ALLOWED_WITHIN_S = 10.0


class Project:
    """A simulated project's Compute records and its network, made real, kept in step."""

    def __init__(self, fabric: Fabric):
        self.compute = SimCompute(ComputeState(), "sim-project")
        self.instances = SimInstances(self.compute)
        self.fabric = fabric
        self.internet = fabric.start()
        self.vpc: Vpc | None = None

    def vm(self, name: str, **fields) -> str:
        self.instances.insert(Instance(name=name, zone=ZONE, machine_type="e2-standard-2", **fields))
        return f"instance:{ZONE}/{name}"

    def sync(self) -> Vpc:
        self.vpc = build_vpc(self.compute.state, [], self.internet, self.vpc)
        self.fabric.sync(self.vpc)
        return self.vpc

    def ns(self, key: str) -> str:
        return self.fabric.host_namespace(key)

    def ip(self, key: str) -> IPv4Address:
        return self.vpc.host(key).internal_ip


@pytest.fixture
def project():
    fabric = Fabric(names.new_prefix())
    try:
        yield Project(fabric)
    finally:
        fabric.down()
        assert names.leftovers(fabric.prefix) == []


def _connect(client_ns: str | None, server_ns: str, bind: IPv4Address, address: IPv4Address, within_s: float,
             kind: int = socket.SOCK_STREAM) -> tuple[str, int] | None:
    """The peer the server saw, when a client in `client_ns` (None: this machine's own namespace,
    the laptop) connects to `address` within `within_s`; None when it does not."""
    with socket_in(server_ns) as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the last test connection's TIME_WAIT
        server.bind((str(bind), PORT))
        server.listen()
        server.settimeout(within_s)
        with (socket_in(client_ns) if client_ns else socket.socket()) as client:
            client.settimeout(within_s)
            try:
                client.connect((str(address), PORT))
            except (TimeoutError, socket.timeout):
                return None
            peer_socket, peer = server.accept()
            peer_socket.close()
            return peer


def test_a_vm_reaches_another_only_through_a_rule_and_a_deleted_rule_stops_it_at_once(project):
    web, client = project.vm("web"), project.vm("client", external_ip=False)
    project.sync()
    # The new project's default-allow-internal admits the network's own range on every port.
    peer = _connect(project.ns(client), project.ns(web), project.ip(web), project.ip(web), ALLOWED_WITHIN_S)
    assert peer is not None and peer[0] == str(project.ip(client))
    project.compute.delete_firewall("default-allow-internal")
    project.sync()
    # Ingress is denied by default: the SYN is dropped, the connection never comes up.
    assert _connect(project.ns(client), project.ns(web), project.ip(web), project.ip(web), DENIED_WITHIN_S) is None
    project.compute.insert_firewall(FirewallRule(name="allow-8080", network="default", source_ranges=["10.128.0.0/9"],
                                                 allowed=[Allowed(protocol="tcp", ports=[str(PORT)])]))
    project.sync()
    assert _connect(project.ns(client), project.ns(web), project.ip(web), project.ip(web), ALLOWED_WITHIN_S)


def test_target_tags_and_source_tags_pick_the_vms(project):
    web, tagged, untagged = project.vm("web", tags=["web"]), project.vm("caller", tags=["caller"]), project.vm("other")
    project.compute.delete_firewall("default-allow-internal")
    project.compute.insert_firewall(FirewallRule(name="callers-to-web", network="default", source_tags=["caller"],
                                                 target_tags=["web"], allowed=[Allowed(protocol="tcp")]))
    project.sync()
    assert _connect(project.ns(tagged), project.ns(web), project.ip(web), project.ip(web), ALLOWED_WITHIN_S)
    assert _connect(project.ns(untagged), project.ns(web), project.ip(web), project.ip(web), DENIED_WITHIN_S) is None
    # The rule targets `web` only: the tagged caller itself is not opened to `web`.
    assert _connect(project.ns(web), project.ns(tagged), project.ip(tagged), project.ip(tagged),
                    DENIED_WITHIN_S) is None


def test_the_reply_to_an_allowed_connection_gets_back_though_the_caller_admits_nothing(project):
    server, caller = project.vm("server", tags=["server"]), project.vm("caller")
    project.compute.delete_firewall("default-allow-internal")
    project.compute.insert_firewall(FirewallRule(name="to-server", network="default", source_ranges=["10.128.0.0/9"],
                                                 target_tags=["server"],
                                                 allowed=[Allowed(protocol="tcp"), Allowed(protocol="udp")]))
    project.sync()
    # The caller's ingress admits nothing from the server, yet the replies come back (stateful).
    assert _connect(project.ns(server), project.ns(caller), project.ip(caller), project.ip(caller),
                    DENIED_WITHIN_S) is None
    with socket_in(project.ns(server)) as listening, socket_in(project.ns(caller)) as talking:
        listening.bind((str(project.ip(server)), PORT))
        listening.listen()
        talking.settimeout(ALLOWED_WITHIN_S)
        talking.connect((str(project.ip(server)), PORT))
        accepted, _ = listening.accept()
        with accepted:
            accepted.sendall(b"reply over tcp")
            assert talking.recv(64) == b"reply over tcp"
    with socket_in(project.ns(server), socket.SOCK_DGRAM) as answering, \
            socket_in(project.ns(caller), socket.SOCK_DGRAM) as asking:
        answering.bind((str(project.ip(server)), PORT))
        answering.settimeout(ALLOWED_WITHIN_S)
        asking.settimeout(ALLOWED_WITHIN_S)
        asking.sendto(b"ask", (str(project.ip(server)), PORT))
        data, sender = answering.recvfrom(64)
        answering.sendto(b"reply over udp", sender)
        assert asking.recvfrom(64)[0] == b"reply over udp"


def test_the_laptop_reaches_an_external_address_only_through_a_rule_admitting_its_public_address(project):
    vm = project.vm("controller")
    vpc = project.sync()
    internet, external = project.internet, vpc.host(vm).external_ip
    assert external in internet.cidr and external != project.ip(vm)
    # No rule admits port 8080 from outside the network.
    assert _connect(None, project.ns(vm), project.ip(vm), external, DENIED_WITHIN_S) is None
    # The laptop's own address is never what the VM sees: a rule for it admits nothing.
    project.compute.insert_firewall(FirewallRule(name="laptop-lan", network="default",
                                                 source_ranges=[f"{internet.laptop_lan}/32"],
                                                 allowed=[Allowed(protocol="tcp", ports=[str(PORT)])]))
    project.sync()
    assert _connect(None, project.ns(vm), project.ip(vm), external, DENIED_WITHIN_S) is None
    project.compute.insert_firewall(FirewallRule(name="laptop-public", network="default",
                                                 source_ranges=[f"{internet.laptop_public}/32"],
                                                 allowed=[Allowed(protocol="tcp", ports=[str(PORT)])]))
    project.sync()
    peer = _connect(None, project.ns(vm), project.ip(vm), external, ALLOWED_WITHIN_S)
    assert peer is not None and peer[0] == str(internet.laptop_public) != str(internet.laptop_lan)
    # Another laptop, with another public address, is not admitted by the first one's rule,
    # and no one on the internet has a route to the VM's internal address.
    laptop2 = project.fabric.second_laptop_namespace
    assert _connect(laptop2, project.ns(vm), project.ip(vm), external, DENIED_WITHIN_S) is None
    with socket_in(laptop2) as outside, pytest.raises(OSError, match="unreachable"):
        outside.settimeout(DENIED_WITHIN_S)
        outside.connect((str(project.ip(vm)), PORT))


def test_the_laptops_address_changes_and_a_rule_for_the_old_one_no_longer_admits_it(project):
    vm = project.vm("controller")
    vpc = project.sync()
    external, old = vpc.host(vm).external_ip, project.internet.laptop_public
    project.compute.insert_firewall(FirewallRule(name="laptop-public", network="default",
                                                 source_ranges=[f"{old}/32"],
                                                 allowed=[Allowed(protocol="tcp", ports=[str(PORT)])]))
    project.sync()
    with socket_in(project.ns(vm)) as server, socket.socket() as laptop:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((str(project.ip(vm)), PORT))
        server.listen()
        server.settimeout(ALLOWED_WITHIN_S)
        laptop.settimeout(ALLOWED_WITHIN_S)
        laptop.connect((str(external), PORT))
        held, _ = server.accept()
        with held:
            held.settimeout(DENIED_WITHIN_S)
            laptop.sendall(b"before")
            assert held.recv(64) == b"before"
            new = project.fabric.move_laptop()
            # The connection made behind the old address is dead, as behind a real NAT that changed.
            laptop.sendall(b"after")
            with pytest.raises((TimeoutError, socket.timeout)):
                held.recv(64)
    assert new != old and new in project.internet.cidr and project.fabric.laptop_public == new
    # Another network, another public address: the rule naming the old one drops the laptop.
    assert _connect(None, project.ns(vm), project.ip(vm), external, DENIED_WITHIN_S) is None
    laptop2 = project.fabric.second_laptop_namespace
    somewhere = project.internet.second_laptop
    peer = _connect(None, laptop2, somewhere, somewhere, ALLOWED_WITHIN_S)
    assert peer is not None and peer[0] == str(new)  # the internet sees the new one
    project.compute.insert_firewall(FirewallRule(name="laptop-moved", network="default",
                                                 source_ranges=[f"{new}/32"],
                                                 allowed=[Allowed(protocol="tcp", ports=[str(PORT)])]))
    project.sync()
    peer = _connect(None, project.ns(vm), project.ip(vm), external, ALLOWED_WITHIN_S)
    assert peer is not None and peer[0] == str(new)


def test_a_vm_without_an_external_address_reaches_the_internet_only_through_cloud_nat(project):
    inside_only, with_external = project.vm("private", external_ip=False), project.vm("public")
    project.sync()
    laptop2, somewhere = project.fabric.second_laptop_namespace, project.internet.second_laptop
    assert _connect(project.ns(inside_only), laptop2, somewhere, somewhere, DENIED_WITHIN_S) is None
    peer = _connect(project.ns(with_external), laptop2, somewhere, somewhere, ALLOWED_WITHIN_S)
    assert peer is not None and peer[0] == str(project.vpc.host(with_external).external_ip)
    project.compute.insert_router(Router(name="nat-router", region=region_of(ZONE), network="default",
                                         nats=[Nat(name="nat")]))
    vpc = project.sync()
    peer = _connect(project.ns(inside_only), laptop2, somewhere, somewhere, ALLOWED_WITHIN_S)
    assert peer is not None and peer[0] == str(vpc.nats[0].address)


def test_a_failure_part_way_leaves_nothing(project, monkeypatch):
    project.vm("one")

    def fail(*args, **kwargs):
        raise RuntimeError("the machine said no")

    monkeypatch.setattr(fabric_module.Fabric, "_make_host", fail)
    with pytest.raises(RuntimeError, match="said no"):
        project.sync()
    assert names.leftovers(project.fabric.prefix) == []


KILLED_SCRIPT = textwrap.dedent("""
    import sys, time
    from podmanager.emulator.network.fabric import Fabric
    from podmanager.emulator.network.model import build_vpc
    from podmanager.emulator.sim.compute import SimCompute
    from podmanager.emulator.sim.records import ComputeState
    fabric = Fabric(sys.argv[1])
    internet = fabric.start()
    fabric.sync(build_vpc(SimCompute(ComputeState(), "p").state, [], internet))
    print(internet.slot, flush=True)
    time.sleep(300)
""")


def test_cleanup_leftovers_removes_what_a_killed_process_left():
    prefix = names.new_prefix()
    process = subprocess.Popen([sys.executable, "-c", KILLED_SCRIPT, prefix], stdout=subprocess.PIPE, text=True)
    try:
        slot = process.stdout.readline().strip()
    finally:
        process.kill()
        process.wait(timeout=30)
    try:
        assert slot, "the process made no network"
        left = names.leftovers(prefix)
        assert f"link {names.root_link(prefix)}" in left and any(item.startswith("netns") for item in left)
        assert f"198.18.{slot}.0/24" in names.run("ip", "-4", "route", "show")
        names.cleanup_leftovers(prefix)
        assert names.leftovers(prefix) == []
        assert f"198.18.{slot}.0/24" not in names.run("ip", "-4", "route", "show")
    finally:
        names.cleanup_leftovers(prefix)
