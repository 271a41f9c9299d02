"""The namespace mode of a dry run: the emulator's simulated VMs on the simulated VPC.

`VmNetwork` is run by the emulator (`simulation network: namespaces`). It keeps the fabric
(`fabric.py`) in step with the simulated project's records: every Compute Engine instance and
every worker of every TPU node gets its namespace and its internal address from its
subnetwork, and the project's firewall rules are applied again whenever the records change
(a rule inserted or deleted through the Compute API holds within one sync). For each VM:

- `exec_prefix(key)`: the command prefix that runs a process inside the VM's namespace
  (`ip netns exec`, which also gives the VM its own /etc/hosts, naming its metadata server and
  the VM itself at its internal address), with the VM's hostname (`unshare --uts`);
- `metadata_socket(key)`: a listening socket at 169.254.169.254:80 inside the VM's namespace,
  where a GCE VM finds its metadata server
  (https://cloud.google.com/compute/docs/metadata/querying-metadata), so google-auth, JAX and
  Ray find it with no override variable;
- the Compute API and the instance's metadata report the external address the network gave it;
- Google's APIs (the emulator's ports on 127.0.0.1) are relayed from the internet segment's
  Google API address (`Internet.google_apis`): a VM reaches them through its external address,
  a Cloud NAT or Private Google Access, as the edge lets it (`nft.edge`).

The relay admits any peer on the internet segment except the laptop's public address (each it
may have: `Fabric.move_laptop` changes it): that is
where every process of this machine's own namespace comes from (any local user), which must
go on reaching the emulator on loopback, where its servers check who the caller is. Only root
makes the namespaces behind the other addresses, and everything in them is the emulator's.
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading
from ipaddress import IPv4Address

from podmanager.cloud.network import region_of
from podmanager.emulator.network import names
from podmanager.emulator.network.fabric import INTERNET_BRIDGE, Fabric, _ip_batch
from podmanager.emulator.network.model import Host, Vpc, build_vpc
from podmanager.emulator.network.sockets import socket_in
from podmanager.emulator.sim.cloud import SimCloud
from podmanager.emulator.sim.compute import SimCompute

log = logging.getLogger(__name__)

METADATA_IP = "169.254.169.254"
METADATA_PORT = 80
METADATA_HOSTNAME = "metadata.google.internal"
LOOPBACK_API = "127.0.0.1"  # where the emulator serves Google's APIs in the machine's own namespace
RELAY_CHUNK = 65536
KEEP_IN_STEP_WAIT_S = 60.0  # the longest a sync waits with nothing changing (it wakes on a change)


def instance_key(zone: str, name: str) -> str:
    return f"instance:{zone}/{name}"


def tpu_key(zone: str, node: str, worker: int) -> str:
    return f"tpu:{zone}/{node}/{worker}"


def vm_hostnames(key: str, project: str) -> list[str]:
    """The names a VM's own address has, its hostname last, as its metadata server's
    `instance/hostname` says (`metadata.py`, `instance_metadata.py`): a Compute Engine
    instance's FQDN `NAME.ZONE.c.PROJECT.internal` and its short name, its hostname
    (https://cloud.google.com/compute/docs/internal-dns), and a TPU worker's `NODE-w-WORKER`.
    On Google Cloud they resolve to the VM's internal address through the metadata server's DNS;
    here through the VM's /etc/hosts."""
    kind, _, where = key.partition(":")
    zone, _, rest = where.partition("/")
    if kind == "instance":
        return [f"{rest}.{zone}.c.{project}.internal", rest]
    node, _, worker = rest.rpartition("/")
    return [f"{node}-w-{worker}"]


class VmNetwork:
    """The simulated VPC of one emulator's project, made real and kept in step with its records."""

    def __init__(self, sim: SimCloud, prefix: str | None = None):
        self.sim = sim
        self.fabric = Fabric(prefix or names.new_prefix())
        self.vpc: Vpc | None = None
        self._lock = threading.Lock()
        self._relays: list[socket.socket] = []
        self._stopped = threading.Event()

    @property
    def prefix(self) -> str:
        return self.fabric.prefix

    def start(self) -> None:
        """The internet, the laptop's home router, the Google API address, the project's VPC."""
        internet = self.fabric.start()
        # The internet's two services: Google's APIs (relayed to the emulator) and the package
        # index (its address only, for now: what listens there is a test's or a later step's).
        _ip_batch(self.fabric.internet_namespace,
                  [f"addr add {address}/{internet.cidr.prefixlen} dev {INTERNET_BRIDGE}"
                   for address in (internet.google_apis, internet.package_index)])
        self.sync()

    def sync(self) -> Vpc:
        """Make the namespaces, addresses and firewall rules match the records as they are now."""
        with self._lock:
            nodes = [n for n in self.sim.node_records() if n.gone_at is None]
            with self.sim.compute() as project:
                for region in {region_of(n.zone) for n in nodes}:
                    project.subnetworks(region)  # an auto-mode network's subnetwork of the region
                assert self.fabric.internet is not None, "start the network first"
                vpc = build_vpc(project.state, nodes, self.fabric.internet, self.vpc)
                _report_external_addresses(project, vpc)
            self.fabric.sync(vpc)
            self.vpc = vpc
            return vpc

    def keep_in_step(self, stopped: threading.Event) -> None:
        """Sync whenever the records change, until `stopped` is set and the cloud told of it (the
        emulator runs this in a thread; its stop sets its event and wakes the cloud's waiters)."""
        while not stopped.is_set() and not self._stopped.is_set():
            version = self.sim.version()
            try:
                self.sync()
            except Exception:  # noqa: BLE001 - a failed sync must not end the network's upkeep
                log.exception("simulated network: sync failed")
            if not stopped.is_set():
                self.sim.wait_for_change(version, KEEP_IN_STEP_WAIT_S)

    def host(self, key: str) -> Host:
        """The VM's interface, synced first: a VM booting now has its namespace when this returns."""
        return self.sync().host(key)

    def namespace(self, key: str) -> str:
        return self.fabric.host_namespace(key)

    def place(self, key: str) -> Host:
        """Ready the VM's namespace for its processes: its metadata server's address on its
        loopback and its /etc/hosts naming it and the VM itself (its hostname, at its internal
        address); the VM's interface."""
        host = self.host(key)
        namespace = self.namespace(key)
        _ip_batch(namespace, [f"addr replace {METADATA_IP}/32 dev lo"])
        etc = names.NETNS_ETC / namespace
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "hosts").write_text(f"127.0.0.1 localhost\n{METADATA_IP} {METADATA_HOSTNAME}\n"
                                   f"{host.internal_ip} {' '.join(vm_hostnames(key, self.sim.project))}\n")
        return host

    def exec_prefix(self, key: str) -> list[str]:
        """Run in the VM's network namespace (`ip netns exec`, which also bind-mounts its
        /etc/hosts) and in a UTS namespace of its own named as the VM (`unshare --uts`, its
        hostname written by the kernel's file: no `hostname` binary needed)."""
        hostname = vm_hostnames(key, self.sim.project)[-1]
        return ["ip", "netns", "exec", self.namespace(key), "unshare", "--uts", "--",
                "sh", "-c", 'echo "$0" > /proc/sys/kernel/hostname && exec "$@"', hostname]

    def metadata_socket(self, key: str) -> socket.socket:
        """A socket bound to the metadata server's address in the VM's namespace (not listening yet)."""
        found = socket_in(self.namespace(key))
        found.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        found.bind((METADATA_IP, METADATA_PORT))
        return found

    @property
    def google_apis(self) -> IPv4Address:
        assert self.fabric.internet is not None, "start the network first"
        return self.fabric.internet.google_apis

    def relay_google_apis(self, ports: list[int]) -> None:
        """Relay each port of the Google API address to the emulator's same port on loopback."""
        for port in ports:
            listening = socket_in(self.fabric.internet_namespace)
            listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listening.bind((str(self.google_apis), port))
            listening.listen(64)
            self._relays.append(listening)
            threading.Thread(target=self._accept, args=(listening, port), name=f"google-apis-{port}",
                             daemon=True).start()

    def _accept(self, listening: socket.socket, port: int) -> None:
        internet = self.fabric.internet
        # Each address the home router has or may get (`move_laptop`): none is ever another's.
        laptop = {str(a) for a in [internet.laptop_public, *internet.laptop_moves()]} if internet else set()
        while not self._stopped.is_set():
            try:
                caller, (address, _) = listening.accept()
            except OSError:
                return  # closed: the network stopped
            if address in laptop:
                caller.close()  # this machine's processes reach the emulator on loopback (see above)
                continue
            try:
                upstream = socket.create_connection((LOOPBACK_API, port), timeout=10)
            except OSError:
                caller.close()
                continue
            threading.Thread(target=_pump, args=(caller, upstream), name=f"google-apis-{port}-conn",
                             daemon=True).start()

    def move_laptop(self) -> IPv4Address:
        """The laptop's public address changed (`Fabric.move_laptop`): the new one (the relay
        refuses it as it did the old: this machine's processes reach the emulator on loopback)."""
        with self._lock:
            return self.fabric.move_laptop()

    def stop(self) -> list[str]:
        """Remove the whole network (every namespace's processes end with it); what was removed."""
        self._stopped.set()
        for listening in self._relays:
            listening.close()
        self._relays.clear()
        with self._lock:
            self.vpc = None
            return self.fabric.down()


def _report_external_addresses(project: SimCompute, vpc: Vpc) -> None:
    """The Compute API (its access config's natIP) and the instance's metadata report the
    external address the network gave the VM, as Google's do: where the laptop dials it."""
    for key, record in project.state.instances.items():
        instance = record.instance
        if not instance.external_address or record.gone_at is not None:
            continue
        given = str(vpc.host(instance_key(instance.zone, instance.name)).external_ip)
        if instance.external_address != given:
            record.instance = instance.model_copy(update={"external_address": given})
            project.changed = True


def _pump(one: socket.socket, other: socket.socket) -> None:
    """Copy bytes both ways until either side closes."""
    one.settimeout(None)
    other.settimeout(None)
    with one, other, selectors.DefaultSelector() as selector:
        selector.register(one, selectors.EVENT_READ, other)
        selector.register(other, selectors.EVENT_READ, one)
        while True:
            for key, _ in selector.select():
                try:
                    data = key.fileobj.recv(RELAY_CHUNK)  # type: ignore[union-attr]
                    if not data:
                        return
                    key.data.sendall(data)
                except OSError:
                    return

