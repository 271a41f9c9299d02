"""The emulator's namespace mode (issue 47, `emulator/network/vm_network.py`): every simulated VM
in its own network namespace on the simulated VPC, behind the project's firewall as the Compute
API changes it; its metadata server at 169.254.169.254, found by Google's own library with no
override; the laptop outside; nothing left after the emulator stops or is killed.

Each test fails on a shared loopback network: there every VM, and the laptop, reach every port
of every other. Linux as root only (CI is). Connections are made from inside the emulator's
namespaces, or from this machine's namespace to the simulated internet (198.18.k.0/24) only."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import textwrap
from ipaddress import IPv4Address
from pathlib import Path

import pytest
from served_emulator import compute_emulator

from podmanager.client.controller_machine import (
    CHANNEL_PORT,
    caller_address,
    on_loopback,
)
from podmanager.cloud.base import CLUSTER_LABEL, NodeNetwork, NodeRequest
from podmanager.cloud.gcp.compute import ComputeNetworks
from podmanager.cloud.gcp.controller_vm import channel_rule, controller_tag
from podmanager.cloud.gcp.instances import ComputeInstances
from podmanager.cloud.instances import Instance
from podmanager.cluster.preflight import cluster_rule
from podmanager.controller.startup import STARTUP_SCRIPT_KEY
from podmanager.core.clock import poll_until
from podmanager.core.network_names import cluster_tag
from podmanager.core.spec import Capacity, parse_spec
from podmanager.emulator import instance_vms, launcher, record, server, vms
from podmanager.emulator.network import names
from podmanager.emulator.network.sockets import socket_in
from podmanager.emulator.network.vm_network import instance_key, tpu_key
from podmanager.emulator.server import Emulator
from podmanager.vm import procs

pytestmark = pytest.mark.processes
needs_namespaces = pytest.mark.skipif(names.unavailable() is not None, reason=f"{names.unavailable()}")

PROJECT = "p-net"
ZONE = "sim-zone-a"
PORT = 8443
DENIED_WITHIN_S = 1.0  # a dropped SYN: the connection has not come up in this long
ALLOWED_WITHIN_S = 10.0
SPEC = parse_spec({"name": "c", "slices": [{"accelerator": "v4-8"}], "zones": [ZONE]}, dry_run=True)


@pytest.fixture
def sim_home(tmp_path, monkeypatch):
    path = tmp_path / "cloud"
    monkeypatch.setenv("PODMANAGER_SIM_HOME", str(path))
    yield path
    procs.remove_vms_folder("c")


@pytest.fixture
def emulator(sim_home):
    with compute_emulator(PROJECT, grpc=True, network="namespaces") as served:
        prefix = served.network.prefix
        yield served
    assert names.leftovers(prefix) == []


@pytest.fixture
def clients(emulator):
    endpoint = f"http://127.0.0.1:{emulator.rest_port}"
    settings = {"endpoint": endpoint, "retry_deadline_s": 5, "retry_initial_s": 0.05, "poll_interval_s": 0.05}
    with ComputeInstances(PROJECT, **settings) as instances, ComputeNetworks(PROJECT, **settings) as networks:
        yield instances, networks


def vm(emulator, instances, name: str, tags: list[str], external_ip: bool = True, metadata=None) -> str:
    """An instance of cluster c, RUNNING, placed on the network; its network key."""
    instances.create(Instance(name=name, zone=ZONE, machine_type="e2-standard-2", tags=tags, external_ip=external_ip,
                              metadata=metadata or {}, labels={CLUSTER_LABEL: "c"}),
                     timeout_s=30)
    key = instance_key(ZONE, name)
    emulator.network.host(key)
    return key


def connects(client_ns: str | None, server_ns: str, bind: IPv4Address, address: IPv4Address, within_s: float) -> bool:
    """Whether a client in `client_ns` (None: this machine's namespace, the laptop) connects to
    `address`:PORT, where a server in `server_ns` listens on `bind`, within `within_s`."""
    with socket_in(server_ns) as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((str(bind), PORT))
        server.listen()
        with (socket_in(client_ns) if client_ns else socket.socket()) as client:
            client.settimeout(within_s)
            try:
                client.connect((str(address), PORT))
            except OSError:  # dropped (timeout), refused or unreachable
                return False
            return True


@needs_namespaces
def test_google_auth_in_a_vm_finds_its_metadata_server_with_no_override(emulator, clients):
    instances, _ = clients
    # Google's own library, from the controller image's environment: its ping (169.254.169.254),
    # then the project and a token by metadata.google.internal, as on a GCE VM.
    script = textwrap.dedent("""\
        #!/bin/bash
        env > "$PODMANAGER_ROOT/root/env"
        found=$("$PODMANAGER_ROOT/opt/podmanager/venv/bin/python" -c '
        import google.auth.compute_engine as ce, google.auth.transport.requests as r
        from google.auth.compute_engine import _metadata
        request = r.Request()
        credentials = ce.Credentials()
        credentials.refresh(request)
        print(_metadata.ping(request), _metadata.get_project_id(request), bool(credentials.token))' 2>&1 | tail -1)
        curl -fsS -X PUT -H "Metadata-Flavor: Google" --data-binary "$found" \\
          "http://metadata.google.internal/computeMetadata/v1/instance/guest-attributes/podmanager/booted"
        exec sleep 300
        """)
    vm(emulator, instances, "c-controller", [], metadata={"startup-script": script, "enable-guest-attributes": "TRUE"})
    found = poll_until(lambda: instances.guest_attributes(ZONE, "c-controller").get("booted"), timeout_s=60,
                       interval_s=0.1, what="the VM's report of what google-auth found")
    assert found == f"True {PROJECT} True"
    record = procs.read_record(instance_vms.record_path(PROJECT, ZONE, "c-controller"))
    env = (Path(record["temp_dir"]) / "root/env").read_text()
    assert "GCE_METADATA_HOST" not in env and "GCE_METADATA_IP" not in env


@needs_namespaces
def test_a_tpu_vm_cannot_reach_the_controllers_channel_port_the_laptop_can(emulator, clients):
    instances, networks = clients
    controller = vm(emulator, instances, "c-controller", [cluster_tag("c"), controller_tag("c")])
    # A TPU VM of the cluster, with its tag and an external address of its own (no startup script: not booted).
    emulator.sim.create_node(ZONE, "c-s0", NodeRequest(
        "v4-8", "rt", Capacity.ON_DEMAND, labels={CLUSTER_LABEL: "c"},
        network=NodeNetwork(enable_external_ips=True, tags=(cluster_tag("c"),))))
    worker = tpu_key(ZONE, "c-s0", 0)
    assert worker in {h.key for h in emulator.network.sync().hosts}  # a node has its VMs from its creation
    internet = emulator.network.fabric.internet
    networks.create_firewall(channel_rule(SPEC, f"{internet.laptop_public}/32", PORT))
    vpc = emulator.network.sync()
    at, external = vpc.host(controller).internal_ip, vpc.host(controller).external_ip
    assert vpc.host(worker).external_ip is not None
    # Where the laptop dials the controller: the Compute API reports the address the network gave it.
    assert instances.get(ZONE, "c-controller").external_address == str(external)
    ns = emulator.network.namespace
    # The channel's rule names the laptop's public address: the laptop gets in at the external address.
    assert connects(None, ns(controller), at, external, ALLOWED_WITHIN_S)
    # The TPU VM does not, though it has an external address too.
    assert not connects(ns(worker), ns(controller), at, external, DENIED_WITHIN_S)
    # Nor does a second laptop, with a public address of its own.
    assert not connects(emulator.network.fabric.second_laptop_namespace, ns(controller), at, external, DENIED_WITHIN_S)


@needs_namespaces
def test_the_channels_rule_admits_the_laptop_where_the_controller_sees_it(emulator, clients, monkeypatch):
    """`up`'s channel rule and port in the namespace mode (client/controller_machine.py): the
    laptop's address as the controller VM sees it, which the emulator's record tells, not the
    loopback the rule names in the loopback mode (there the laptop would be refused)."""
    instances, networks = clients
    server._write_record(PROJECT, f"127.0.0.1:{emulator.grpc_port}", f"http://127.0.0.1:{emulator.rest_port}",
                         emulator.laptop_public())
    monkeypatch.setattr(launcher, "running", lambda project: record.read(project))  # this test is no emulator process
    spec = SPEC.model_copy(update={"project": PROJECT})
    caller = caller_address(spec)
    assert caller == f"{emulator.network.fabric.internet.laptop_public}/32"
    assert not on_loopback(spec)  # the VM's ports are its own: the channel takes Google Cloud's
    controller = vm(emulator, instances, "c-controller", [cluster_tag("c"), controller_tag("c")])
    networks.create_firewall(channel_rule(spec, caller, CHANNEL_PORT))
    vpc = emulator.network.sync()
    ns, at, external = emulator.network.namespace, vpc.host(controller).internal_ip, vpc.host(controller).external_ip
    with socket_in(ns(controller)) as served:
        served.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        served.bind((str(at), CHANNEL_PORT))
        served.listen()
        with socket.create_connection((str(external), CHANNEL_PORT), timeout=ALLOWED_WITHIN_S):
            pass


@needs_namespaces
def test_the_laptop_has_no_route_to_a_vms_internal_address(emulator, clients):
    instances, _ = clients
    controller = vm(emulator, instances, "c-controller", [])
    fabric, at = emulator.network.fabric, emulator.network.vpc.host(instance_key(ZONE, "c-controller")).internal_ip
    # This machine's one link into the simulation routes the internet segment only (never
    # connect from here to a private address: outside the simulation it may be someone's).
    routes = names.run("ip", "-4", "route", "show", "dev", names.root_link(emulator.network.prefix))
    assert [line.split()[0] for line in routes.splitlines() if "via" in line] == [str(fabric.internet.cidr)]
    with socket_in(fabric.second_laptop_namespace) as outside, pytest.raises(OSError, match="unreachable"):
        outside.settimeout(DENIED_WITHIN_S)
        outside.connect((str(at), PORT))
    assert not connects(fabric.second_laptop_namespace, emulator.network.namespace(controller), at, at,
                        DENIED_WITHIN_S)


@needs_namespaces
def test_vms_reach_each_other_through_the_cluster_rule_and_not_once_it_is_deleted(emulator, clients):
    instances, networks = clients
    networks.delete_firewall("default-allow-internal")  # only the cluster's own rule between its VMs
    networks.create_firewall(cluster_rule(SPEC, "default"))
    head = vm(emulator, instances, "c-controller", [cluster_tag("c")])
    joiner = vm(emulator, instances, "c-worker", [cluster_tag("c")])
    stranger = vm(emulator, instances, "other", ["other"])
    ns, at = emulator.network.namespace, emulator.network.vpc.host(head).internal_ip
    assert connects(ns(joiner), ns(head), at, at, ALLOWED_WITHIN_S)
    assert not connects(ns(stranger), ns(head), at, at, DENIED_WITHIN_S)
    networks.delete_firewall(cluster_rule(SPEC, "default").name)
    # The emulator applies the change by itself (no sync here): the next connection is refused.
    poll_until(lambda: not connects(ns(joiner), ns(head), at, at, DENIED_WITHIN_S), timeout_s=30, interval_s=0.1,
               what="the deleted rule no longer admitting the cluster's VM")


@needs_namespaces
def test_a_vm_without_an_external_address_or_cloud_nat_cannot_reach_the_package_index(emulator, clients):
    instances, _ = clients
    private = vm(emulator, instances, "private", [], external_ip=False)
    public = vm(emulator, instances, "public", [])
    index, ns = emulator.network.fabric.internet.package_index, emulator.network.namespace
    internet = emulator.network.fabric.internet_namespace
    assert not connects(ns(private), internet, index, index, DENIED_WITHIN_S)
    assert connects(ns(public), internet, index, index, ALLOWED_WITHIN_S)


@needs_namespaces
def test_podmanager_on_a_vm_finds_the_projects_emulator_where_the_vm_reaches_it(emulator, clients):
    instances, _ = clients
    server._write_record(PROJECT, f"127.0.0.1:{emulator.grpc_port}", f"http://127.0.0.1:{emulator.rest_port}")
    # What the controller's podmanager does: find the emulator by its record, then call it.
    script = textwrap.dedent("""\
        #!/bin/bash
        found=$("$PODMANAGER_ROOT/opt/podmanager/venv/bin/python" -c '
        import socket, sys, urllib.error, urllib.request
        from podmanager.emulator import record
        found = record.read(sys.argv[1])  # launcher.running reads it so (this test is no emulator process)
        try:
            urllib.request.urlopen(found.compute_api + "/no-such-route", timeout=10)
        except urllib.error.HTTPError as answer:
            status = answer.code
        host, port = found.address.rsplit(":", 1)
        socket.create_connection((host, int(port)), timeout=10).close()
        print(host, status)' p-net 2>&1 | tail -1)
        curl -fsS -X PUT -H "Metadata-Flavor: Google" --data-binary "$found" \
          "http://metadata.google.internal/computeMetadata/v1/instance/guest-attributes/podmanager/booted"
        exec sleep 300
        """)
    vm(emulator, instances, "c-controller", [], metadata={"startup-script": script, "enable-guest-attributes": "TRUE"})
    found = poll_until(lambda: instances.guest_attributes(ZONE, "c-controller").get("booted"), timeout_s=60,
                       interval_s=0.1, what="the VM's report of the emulator it reached")
    assert found == f"{emulator.network.google_apis} 404"


@needs_namespaces
def test_a_vms_ray_node_address_is_its_internal_address_on_the_vpc(emulator, clients):
    """What the controller VM's Ray head binds and advertises (controller/head.py): the address
    its metadata server gives, on an interface of its own, not the loopback every VM shares."""
    instances, _ = clients
    script = textwrap.dedent("""\
        #!/bin/bash
        found=$("$PODMANAGER_ROOT/opt/podmanager/venv/bin/python" -c '
        import socket
        from podmanager.vm.node_address import simulated_node_address
        address = simulated_node_address()
        socket.create_server((address, 0)).close()  # bound: an interface of this VM
        print(address)' 2>&1 | tail -1)
        curl -fsS -X PUT -H "Metadata-Flavor: Google" --data-binary "$found" \
          "http://metadata.google.internal/computeMetadata/v1/instance/guest-attributes/podmanager/node-address"
        exec sleep 300
        """)
    key = vm(emulator, instances, "c-controller", [], metadata={"startup-script": script,
                                                               "enable-guest-attributes": "TRUE"})
    found = poll_until(lambda: instances.guest_attributes(ZONE, "c-controller").get("node-address"), timeout_s=60,
                       interval_s=0.1, what="the VM's report of its Ray node address")
    assert found == str(emulator.network.vpc.host(key).internal_ip)


def http_status(client_ns: str | None, address: IPv4Address, port: int) -> int | None:
    """The status of a GET / at address:port from `client_ns` (None: this machine's namespace);
    None when the connection is closed unanswered."""
    with (socket_in(client_ns) if client_ns else socket.socket()) as client:
        client.settimeout(ALLOWED_WITHIN_S)
        client.connect((str(address), port))
        client.sendall(f"GET / HTTP/1.0\r\nHost: {address}\r\n\r\n".encode())
        try:
            answer = client.recv(64)
        except ConnectionResetError:
            return None
        return int(answer.split()[1]) if answer.startswith(b"HTTP/") else None


@needs_namespaces
def test_googles_apis_answer_a_vm_at_the_internet_address_and_not_the_laptop_there(emulator, clients):
    instances, _ = clients
    public = vm(emulator, instances, "public", [])
    apis = emulator.network.google_apis
    # The VM (out through its external address) gets the emulator's own answer; this machine's
    # processes, any local user's, are turned away there: they reach the emulator on loopback.
    assert http_status(emulator.network.namespace(public), apis, emulator.rest_port) == 404
    assert http_status(None, apis, emulator.rest_port) is None


@needs_namespaces
def test_each_host_of_a_tpu_slice_boots_on_its_own_internal_address(emulator):
    # Each host reports the address its eth0 holds and the slice's endpoints, as its metadata serves them.
    script = textwrap.dedent("""\
        #!/bin/bash
        M="http://metadata.google.internal/computeMetadata/v1/instance/attributes"
        own=$(ip -4 -o addr show dev eth0 | awk '{print $4}' | cut -d/ -f1)
        all=$(curl -fsS -H "Metadata-Flavor: Google" "$M/worker-network-endpoints")
        echo "$own $all" > "$PODMANAGER_ROOT/root/addresses"
        exec sleep 300
        """)
    request = NodeRequest("v4-16", "rt", Capacity.ON_DEMAND, labels={CLUSTER_LABEL: "c"},
                          metadata={STARTUP_SCRIPT_KEY: script})
    emulator.sim.create_node(ZONE, "c-s0", request)
    records = poll_until(lambda: (found := vms.host_records("c")) and len(found) == 2 and found or None,
                         timeout_s=30, interval_s=0.1, what="the slice's two hosts booting")
    files = [Path(r["temp_dir"]) / "root/addresses" for r in sorted(records, key=lambda r: r["worker_id"])]
    reports = poll_until(lambda: all(f.exists() and f.read_text().strip() for f in files) and
                         [f.read_text().split() for f in files] or None, timeout_s=30, interval_s=0.1,
                         what="each host's report of its addresses")
    vpc = emulator.network.vpc
    internal = [str(vpc.host(tpu_key(ZONE, "c-s0", worker)).internal_ip) for worker in (0, 1)]
    subnet = vpc.subnet_of(vpc.host(tpu_key(ZONE, "c-s0", 0))).cidr
    assert all(IPv4Address(address) in subnet for address in internal) and internal[0] != internal[1]
    assert reports == [[internal[0], ",".join(internal)], [internal[1], ",".join(internal)]]
    emulator.sim.delete_node(ZONE, "c-s0")
    poll_until(lambda: not any(tpu_key(ZONE, "c-s0", w) in {h.key for h in emulator.network.sync().hosts}
                               for w in (0, 1)) or None, timeout_s=30, interval_s=0.1, what="the slice's hosts gone")
    namespaces = names.namespaces_of(emulator.network.prefix)
    assert not any(emulator.network.namespace(tpu_key(ZONE, "c-s0", w)) in namespaces for w in (0, 1))


@needs_namespaces
def test_a_tpu_vm_resolves_its_own_hostname_to_its_internal_address(emulator):
    # As on Google Cloud (its metadata server's DNS): the VM's hostname, its internal address.
    script = textwrap.dedent("""\
        #!/bin/bash
        python3 -c 'import socket; name = socket.gethostname(); print(name, socket.gethostbyname(name))' \\
          > "$PODMANAGER_ROOT/root/resolved" 2>&1
        exec sleep 300
        """)
    request = NodeRequest("v4-8", "rt", Capacity.ON_DEMAND, labels={CLUSTER_LABEL: "c"},
                          metadata={STARTUP_SCRIPT_KEY: script})
    emulator.sim.create_node(ZONE, "c-s0", request)
    [record] = poll_until(lambda: vms.host_records("c") or None, timeout_s=30, interval_s=0.1,
                          what="the slice's host booting")
    report = Path(record["temp_dir"]) / "root/resolved"
    resolved = poll_until(lambda: report.exists() and report.read_text().split() or None, timeout_s=30,
                          interval_s=0.1, what="the host's report of its name and address")
    internal = str(emulator.network.vpc.host(tpu_key(ZONE, "c-s0", 0)).internal_ip)
    assert resolved == ["c-s0-w-0", internal]  # its metadata server's `instance/hostname`, not this machine's


KILLED = textwrap.dedent("""
    import sys, time
    from podmanager.emulator.server import Emulator
    emulator = Emulator(sys.argv[1], persist=False, network="namespaces")
    emulator.start()
    print(emulator.network.prefix, flush=True)
    time.sleep(300)
""")


@needs_namespaces
def test_what_a_killed_emulator_left_the_next_network_on_the_machine_removes(sim_home, tmp_path):
    # Another simulated cloud's folder: what the killed one left is found by the machine's claims alone.
    other = {**os.environ, "PODMANAGER_SIM_HOME": str(tmp_path / "another-cloud")}
    process = subprocess.Popen([sys.executable, "-c", KILLED, PROJECT], stdout=subprocess.PIPE, text=True, env=other)
    try:
        prefix = process.stdout.readline().strip()
    finally:
        process.kill()
        process.wait(timeout=30)
    try:
        assert prefix and names.leftovers(prefix), "the killed emulator made no network"
        assert prefix in names.orphans()
        emulator = Emulator(PROJECT, persist=False, network="namespaces")
        emulator.start()
        try:
            assert names.leftovers(prefix) == [] and prefix not in names.orphans()
        finally:
            emulator.stop()
        assert names.leftovers(emulator.network.prefix) == []
    finally:
        names.cleanup_leftovers(prefix)
        names.release(prefix)


FABRIC_KILLED = textwrap.dedent("""
    import sys, time
    from podmanager.emulator.network.fabric import Fabric
    fabric = Fabric(sys.argv[1])
    fabric.start()
    print("made", flush=True)
    time.sleep(300)
""")


@needs_namespaces
def test_down_with_no_emulator_running_removes_a_killed_processs_network(sim_home):
    prefix = names.new_prefix()
    process = subprocess.Popen([sys.executable, "-c", FABRIC_KILLED, prefix], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "made"
    finally:
        process.kill()
        process.wait(timeout=30)
    try:
        assert names.leftovers(prefix) and prefix in names.orphans()
        # What `down` of a dry run's last cluster calls (cluster/teardown.py), its emulator gone.
        assert launcher.stop_if_idle(PROJECT) is False
        assert names.leftovers(prefix) == []
    finally:
        names.cleanup_leftovers(prefix)


def test_without_namespaces_the_loopback_mode_stays_and_says_why(sim_home, monkeypatch, caplog):
    monkeypatch.setattr(names, "unavailable", lambda: "network namespaces need root")
    emulator = Emulator(PROJECT, persist=False, network="namespaces")
    with caplog.at_level(logging.WARNING):
        emulator.start()
    try:
        assert emulator.network is None
        assert [r.getMessage() for r in caplog.records if "loopback" in r.getMessage()] == [
            "simulated network: staying with the loopback mode (network namespaces need root); "
            "docs/dry-run.md says what it does not rehearse"]
    finally:
        emulator.stop()
