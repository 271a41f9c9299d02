"""Simulated TPU VMs: every host of a READY simulated slice boots as a real one does.

`SimHostBooter` is a `SimCloud` listener, run by the emulator (the one process that owns
the simulated cloud). When a node with a startup script in its metadata turns READY, each of
its hosts gets what a TPU VM has and nothing more: its own root folder (its own /opt, /etc,
root's HOME, tmp), its own metadata server (served by the emulator: the node's metadata, the
project, a service-account token, guest attributes), and a guest that fetches the node's
`startup-script` from that server and runs it with bash, from the VM's root. The script
installs the software, reads the Ray token from Secret Manager and joins the head named in
metadata, as on Google Cloud. What a VM's environment carries besides (the README lists why):
TPU_* identity (Ray asks metadata.google.internal, which only a real VM answers) and, in
PODMANAGER_JOIN_ARGS, its chips as a Ray resource and a port and Ray temp dir of its own.
The VM's disk: its system image (a TPU VM's Ubuntu 22.04, a Compute Engine VM's Debian 12:
`make_disk`), started with the image's own PATH and nothing of this machine's environment, and
the cluster's `simulation.vm_image`: "bare" has nothing of podmanager, so the script installs
everything as on Google Cloud; "controller" links the controller's environment at
/opt/podmanager/venv (the one shortcut, taken only when the script finds exactly the versions it
pins there). Which one a cluster gets unless it says is `core.spec.DEFAULT_VM_IMAGE`.
It returns at once: the hosts boot in parallel, each as a `procs` machine of the cluster's
owner, and outlive the process that started them. Each host's machine id is recorded in
`clusters/<cluster>/hosts/<node>-w<i>.json` under `paths.sim_home()` before it boots; when the node is preempted,
terminated, deleted or gone, its machines are SIGKILLed like a vanished VM. `kill_cluster_hosts` is what `stop` uses. A host whose
record is gone stops itself (`lease.py`): a lost state folder leaves no VM running.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import logging
import os
import platform
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, Protocol
from urllib.parse import urlparse

from podmanager.cloud.base import DEAD_STATES, Node, NodeState
from podmanager.controller.startup import STARTUP_SCRIPT_KEY
from podmanager.core import paths
from podmanager.core.catalog import lookup
from podmanager.core.local_ports import LOOPBACK_IP, free_port
from podmanager.core.spec import DEFAULT_VM_IMAGE, ClusterSpec
from podmanager.emulator.network.vm_network import VmNetwork, tpu_key
from podmanager.emulator.record import APIS_HOST_ENV
from podmanager.vm import procs
from podmanager.vm.join import JOIN_ARGS_ENV
from podmanager.vm.ray_node import OBJECT_STORE_BYTES
from podmanager.vm.workload_runs import MEGASCALE_FILE_ENV

log = logging.getLogger(__name__)

HOSTS_DIR = "hosts"
GONE_STATES = DEAD_STATES | {NodeState.DELETING}
CONTROLLER_IMAGE = "controller"  # the controller's environment linked (`SimulationSpec.vm_image`)
# The system images (the stand-ins of `make_disk`): https://cloud.google.com/tpu/docs/runtimes
# (TPU VMs: tpu-ubuntu2204-base and the v2-alpha-tpuv5/v6e images, Ubuntu 22.04) and the
# controller VM's `debian-12` (cloud/gcp/instances.py).
UBUNTU_2204 = "ubuntu-2204"  # python3 3.10 with pip, without python3-venv
DEBIAN_12 = "debian-12"  # python3 3.11.2 without pip or venv (https://wiki.debian.org/Python), curl
# Both images' PATH for root (Debian's and Ubuntu's default), never this machine's: the image's
# python3 is put first, in the VM's root.
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# What a TPU VM does at boot: the image's own boot (`simulation.boot_delay_s`), then its guest
# agent fetches the startup script from the metadata server and runs it.
BOOT_DELAY_ENV = "PODMANAGER_BOOT_DELAY_S"
# The startup script's waits between reads of the Ray token (2 4 8 16 s on a real VM, where an
# IAM grant takes a while to reach it): the simulated Secret Manager's grants hold at once, so a
# VM that may not read the token fails its boot in seconds, the same number of tries.
TOKEN_WAITS_ENV = "PODMANAGER_TOKEN_WAITS"
SIMULATED_TOKEN_WAITS = "0.2 0.4 0.8 1.6"
GUEST_BOOT = (
    f'sleep "${{{BOOT_DELAY_ENV}:-0}}" && '
    'mkdir -p "$PODMANAGER_ROOT/var/lib/google" && '
    'curl -fsS --retry 10 --retry-connrefused -H "Metadata-Flavor: Google" '
    '-o "$PODMANAGER_ROOT/var/lib/google/startup-script" '
    '"$PODMANAGER_METADATA_URL/instance/attributes/startup-script" && '
    'exec bash "$PODMANAGER_ROOT/var/lib/google/startup-script"'
)


def hosts_dir(cluster: str) -> Path:
    path = paths.sim_cluster_dir(cluster) / HOSTS_DIR
    path.mkdir(parents=True, exist_ok=True)
    return path


def record_path(cluster: str, node_name: str, worker_id: int) -> Path:
    return hosts_dir(cluster) / f"{node_name}-w{worker_id}.json"


def temp_dir(cluster: str, machine_id: str) -> str:
    """One simulated VM's root folder (its Ray temp dir is `tmp/ray` inside).

    One per machine, not per slot: a VM that stops (and removes its root) never takes the
    root of a new VM in its place, and hosts on one machine never share Ray's socket names
    (raylet.1, plasma_store.1: "Address already in use"). Inside the folder of the cluster's
    simulated VMs (`procs.temp_dir_of`, in the user's own `paths.machines_dir()`: no one else may
    enter it), which `down` removes once they are gone, and short: Unix socket paths in the Ray
    temp dir are limited to 107 bytes (`paths.machines_dir` counts them).
    """
    return f"{procs.temp_dir_of(procs.sim_owner(cluster))}/{machine_id[:8]}"


def host_env(node: Node, worker_id: int) -> dict[str, str]:
    """Which simulated host this is, for podmanager's own bookkeeping. No TPU identity: the join
    reads that from the VM's metadata server, as on a real VM (vm/tpu_identity.py)."""
    return {"PODMANAGER_SIM_HOST": f"{node.cluster}/{node.name}/{worker_id}"}


def vm_env(node: Node, worker_id: int, root: Path, metadata_port: int | None, record: Path,
           rest_api: str) -> dict[str, str]:
    """Everything a simulated TPU VM's boot starts with: a fresh environment, not the controller's.
    `metadata_port` None: the VM is in its own network namespace, its server at 169.254.169.254."""
    return {**guest_env(root, metadata_port, rest_api), **host_env(node, worker_id),
            **metadata_env(metadata_port, record)}


def guest_env(root: Path, metadata_port: int | None, rest_api: str) -> dict[str, str]:
    """What every simulated VM (a TPU VM, a Compute Engine instance) boots with: the image's PATH,
    its own root and temp folder, its metadata server, the emulator's APIs (Google's, as the VM
    reaches them), and the simulated cloud's folder, which stands in for "the VM can reach
    Google's APIs" when a VM runs podmanager itself (docs/dry-run.md). `metadata_port` None:
    the VM has its own network namespace, where its metadata server is where a GCE VM's is,
    which Google's libraries find with no override."""
    return {
        "PATH": os.pathsep.join([str(root / IMAGE_BIN), IMAGE_PATH]),  # the image's python3 first
        "UV_CACHE_DIR": str(shared_uv_cache() / "uv"),  # a stand-in that saves downloads only
        "PODMANAGER_WHEEL_CACHE": str(shared_uv_cache() / "wheels"),
        "LANG": "C.UTF-8",
        "TMPDIR": str(root / "tmp"),
        "XDG_CONFIG_DIRS": str(root / IMAGE_CONFIG),  # the image's system-wide settings (pip's: its index)
        procs.ROOT_ENV: str(root),
        "PODMANAGER_METADATA_URL": f"http://{_metadata_address(metadata_port)}/computeMetadata/v1",
        "PODMANAGER_SECRETS_API": f"{rest_api}/v1",
        "PODMANAGER_STORAGE_API": rest_api,
        TOKEN_WAITS_ENV: SIMULATED_TOKEN_WAITS,
        **_metadata_overrides(metadata_port),
        paths.SIM_HOME_ENV: str(paths.sim_home()),
        # In its own namespace, the VM reaches the emulator where `rest_api` is: the record says so.
        **({APIS_HOST_ENV: urlparse(rest_api).hostname or ""} if metadata_port is None else {}),
    }


def _metadata_address(port: int | None) -> str:
    return METADATA_HOST if port is None else f"{LOOPBACK_IP}:{port}"


def _metadata_overrides(port: int | None) -> dict[str, str]:
    """JAX (GCE_METADATA_IP), Google's client libraries (GCE_METADATA_HOST): the VM's own server
    on loopback; none in a namespace of its own."""
    if port is None:
        return {}
    address = _metadata_address(port)
    return {"GCE_METADATA_IP": address, "GCE_METADATA_HOST": address}


def metadata_env(port: int | None, record: Path) -> dict[str, str]:
    """What points a simulated TPU VM's processes at its own metadata server (JAX, Google's client
    libraries, the host agent's notice watch), and where the agent leaves a run's MEGASCALE_*
    values for `tpu-env`."""
    return {**_metadata_overrides(port), MEGASCALE_FILE_ENV: str(record.with_suffix(".megascale"))}


METADATA_HOST = "metadata.google.internal"  # a GCE VM's metadata server, by the name its /etc/hosts gives
IMAGE_BIN = "usr/bin"  # in a VM's root: the image's own commands, first on its PATH
IMAGE_CONFIG = "etc/xdg"  # in a VM's root: the image's system-wide settings, where pip looks (XDG_CONFIG_DIRS)


def debian_python() -> str:
    """The stand-in for Debian 12's `python3`: this machine's Debian Python (3.11.2 on Debian 12)
    where there is one, else the interpreter running; both without site-packages (-S)."""
    system = Path("/usr/bin/python3")
    return str(system) if system.exists() else getattr(sys, "_base_executable", sys.executable)


def ubuntu_python() -> str | None:
    """The stand-in for Ubuntu 22.04's `python3` with pip: an environment made once per machine
    (`images/ubuntu-2204` under the machines folder) from this machine's CPython 3.10 with the pip
    it bundles, nothing else in it; its python. None when this machine has no CPython 3.10."""
    image = paths.machines_dir() / "images" / UBUNTU_2204
    python = image / "bin" / "python3"
    if python.exists():
        return str(python)
    # Where this machine may have one: the system's, pyenv's, uv's own installations.
    home = Path.home()
    candidates = [shutil.which("python3.10", path=IMAGE_PATH) or "",
                  *sorted(glob.glob(f"{home}/.pyenv/versions/3.10.*/bin/python3.10")),
                  *sorted(glob.glob(f"{home}/.local/share/uv/python/cpython-3.10.*-linux-*-gnu/bin/python3.10"))]
    interpreter = next((found for found in candidates if found and os.access(found, os.X_OK)), None)
    if interpreter is None:
        return None
    env = {name: value for name, value in os.environ.items() if name not in ("VIRTUAL_ENV", "PYTHONPATH")}
    image.parent.mkdir(parents=True, exist_ok=True)
    with open(image.parent / ".lock", "a+") as handle:  # VMs booting at once make it once
        fcntl.flock(handle, fcntl.LOCK_EX)
        if not python.exists():
            staging = Path(f"{image}.{os.getpid()}")
            subprocess.run([interpreter, "-m", "venv", str(staging)], env=env, check=True,
                           capture_output=True, timeout=300)
            os.rename(staging, image)
    return str(python)


def image_python(system: str) -> str:
    """The command line that stands in for the `python3` of the system image `system`."""
    if system == UBUNTU_2204:
        found = ubuntu_python()
        if found:
            return shlex.quote(found)
    return f"{shlex.quote(debian_python())} -S"  # no site-packages: no pip, nothing installed here


def python_download(root: Path) -> None:
    """What uv's download of the controller's Python would unpack on the VM, in the folder the
    startup script gives uv for it (`UV_PYTHON_INSTALL_DIR`): this machine's installation of the
    interpreter running, linked. uv cannot download Pythons here (GitHub is unreachable), and an
    interpreter of the exact version is what the download would be."""
    downloads = root / "opt/podmanager/python"
    downloads.mkdir(parents=True, exist_ok=True)
    unpacked = downloads / f"cpython-{platform.python_version()}-linux-{platform.machine()}-gnu"
    unpacked.mkdir(exist_ok=True)  # a folder (uv takes no link as an installation of its own) of links
    for entry in os.listdir(sys.base_prefix):
        if not (unpacked / entry).is_symlink():
            (unpacked / entry).symlink_to(Path(sys.base_prefix) / entry)


def shared_uv_cache() -> Path:
    """The caches every simulated VM of this user shares: uv's (`uv`) and the binaries of the uv
    wheel the boot bootstraps (`wheels`). They only save downloads: what is installed is what the
    lock and the index say, and the binaries were checked against the index's SHA-256."""
    return paths.machines_dir() / "vm-cache"


def make_disk(root: Path, image: str, system: str = UBUNTU_2204, index_url: str = "") -> None:
    """A simulated VM's root folder as its image has it: empty folders, the system image's
    `python3` (Debian 12's without pip, https://wiki.debian.org/Python, so a boot that needs pip
    fails here as it would there; Ubuntu 22.04's with it), the Python download's stand-in, and
    for the "controller" image the controller's environment at /opt/podmanager/venv (a link).
    `index_url`: the package index stand-in (`package_index.py`), the image's default index in
    its system-wide pip settings, where a real VM's default is PyPI ("": PyPI itself)."""
    paths.private_dir(root.parent)  # the VMs' disks: only the owner may enter
    for folder in ("opt/podmanager", "etc", "root", "tmp", "var/log", IMAGE_BIN):
        (root / folder).mkdir(parents=True, exist_ok=True)
    python = root / IMAGE_BIN / "python3"
    python.write_text(f"#!/bin/sh\nexec {image_python(system)} \"$@\"\n")
    python.chmod(0o755)
    python_download(root)
    if index_url:  # pip's system-wide file; the spec's index, written for root at boot, comes after it
        (root / IMAGE_CONFIG / "pip").mkdir(parents=True, exist_ok=True)
        (root / IMAGE_CONFIG / "pip" / "pip.conf").write_text(f"[global]\nindex-url = {index_url}\n")
    venv = root / "opt/podmanager/venv"
    if image == CONTROLLER_IMAGE and not venv.is_symlink():
        venv.symlink_to(sys.prefix)


def image_env(image: str) -> dict[str, str]:
    """The "controller" image's PYTHONPATH, part of the controller's environment it links (the
    shortcut's; a VM that installs at boot gets nothing of this machine's environment)."""
    if image == CONTROLLER_IMAGE and os.environ.get("PYTHONPATH"):
        return {"PYTHONPATH": os.environ["PYTHONPATH"]}
    return {}


def start_guest(root: Path, env: dict[str, str], record: Path, machine_id: str, owner: str,
                inside: list[str] = ()) -> list[subprocess.Popen]:
    """Boot a simulated VM whose record (its lease) is written: its guest fetches and runs the
    startup script (GUEST_BOOT), and a lease holder stops the VM when the record no longer names it.
    Both are one `procs` machine: it dies with the VM, and the VM with it. Its console: the record's .log.
    `inside`: the command prefix that runs them in the VM's network namespace (the namespace mode)."""
    log_path = record.with_suffix(".log")
    holder = [sys.executable, "-m", "podmanager.emulator.vm_lease", "--lease", str(record), "--temp-dir", str(root)]
    # The lease holder is the simulator's, not the VM's: it runs podmanager as the emulator does.
    machinery = {**env, **({"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {})}
    return [procs.launch([*inside, "bash", "-c", GUEST_BOOT], env, log_path, machine_id, owner=owner, cwd=root)[0],
            procs.launch([*inside, *holder], machinery, log_path, machine_id, owner=owner)[0]]


class MetadataHost(Protocol):
    """Where the simulated VMs' metadata servers run (the emulator's `MetadataServers`)."""

    def start(self, *, zone: str, node: str, worker: int, accelerator: str, endpoints: list[str],
              megascale_file: Path, port: int = 0, inside_vm: tuple[str, Callable[[], socket.socket]] | None = None
              ) -> int: ...

    def stop(self, zone: str, node: str) -> None: ...


@contextlib.contextmanager
def _locked(cluster: str) -> Iterator[None]:
    with open(hosts_dir(cluster) / ".lock", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class SimHostBooter:
    """SimCloud listener that boots and kills the simulated hosts of every cluster.

    Needs nothing but the node and the files under `paths.sim_home()`: the VM reads everything
    else (the script, the head's address, its token) as a real one does.
    """

    def __init__(self, *, object_store_memory: int = OBJECT_STORE_BYTES, num_cpus: int = 1,
                 metadata: MetadataHost | None = None, image_of: Callable[[str], str] | None = None,
                 boot_delay_of: Callable[[str], float] | None = None) -> None:
        """`metadata`: where each VM's metadata server runs (without it, no VM boots).
        `image_of(cluster)`: the cluster's VM image (default `DEFAULT_VM_IMAGE`); `boot_delay_of(cluster)`:
        the seconds its VMs boot before their startup script runs (default 0)."""
        self.object_store_memory = object_store_memory
        self.num_cpus = num_cpus
        self.metadata = metadata
        self.image_of = image_of or (lambda cluster: DEFAULT_VM_IMAGE)
        self.boot_delay_of = boot_delay_of or (lambda cluster: 0.0)
        self.rest_api = ""  # the emulator's Secret Manager and storage REST root, as the VMs reach it
        self.index_url = ""  # the package index stand-in, as the VMs reach it ("": the index itself)
        self.network: VmNetwork | None = None  # the namespace mode's network (None: loopback)
        self._children: list[subprocess.Popen] = []
        self._mutex = threading.Lock()

    def __call__(self, before: Node | None, after: Node | None) -> None:
        try:
            self._on_change(before, after)
        except Exception:  # noqa: BLE001 - a failed boot must not break the cloud call that saw it
            log.exception("simulated hosts: handling %s -> %s failed", before and before.state, after and after.state)

    def _on_change(self, before: Node | None, after: Node | None) -> None:
        self._reap()
        node = after or before
        if node is None or node.cluster is None:
            return
        if after is None or after.state in GONE_STATES:
            killed = kill_node_hosts(node.cluster, node.name)
            if self.metadata is not None:
                self.metadata.stop(node.zone, node.name)
            if killed:
                log.info("simulated hosts of %s killed (%s)", node.name, "gone" if after is None else after.state.value)
        elif after.state is NodeState.READY and (before is None or before.state is not NodeState.READY):
            self.boot(after)

    def boot(self, node: Node) -> list[str]:
        """Boot the hosts of `node` that are not running yet; returns their machine ids."""
        cluster = node.cluster
        if STARTUP_SCRIPT_KEY not in node.metadata or cluster is None or self.metadata is None:
            return []  # boot_hosts: false, or not a podmanager node: a VM with nothing to run
        accelerator = lookup(node.accelerator_type)
        started: list[str] = []
        with _locked(cluster):
            live = procs.machines()  # one scan of the process table for all hosts of the node
            for worker_id in range(accelerator.hosts):
                path = record_path(cluster, node.name, worker_id)
                record = procs.read_record(path)
                if record is not None and record.get("machine_id") in live:
                    continue
                started.append(self._spawn(node, worker_id, accelerator.chips_per_host, path))
        return started

    def _spawn(self, node: Node, worker_id: int, chips: int, path: Path) -> str:
        assert node.cluster is not None
        machine_id = procs.new_machine_id()
        root = Path(temp_dir(node.cluster, machine_id))  # the VM's disk
        image = self.image_of(node.cluster)
        make_disk(root, image, index_url=self.index_url)
        join_args = [
            f"--resources={json.dumps({'TPU': chips}, separators=(',', ':'))}",  # CPU devices stand in for chips
            f"--num-cpus={self.num_cpus}",
            f"--object-store-memory={self.object_store_memory}",
            f"--temp-dir={root / 'tmp' / 'ray'}",
            f"--agent-port={free_port(LOOPBACK_IP)}",  # VMs on one machine share its ports
            "--light",
        ]
        log_path = path.with_suffix(".log")  # the VM's serial console
        inside: list[str] = []
        if self.network is None:
            metadata_port: int | None = self._serve_metadata(node, worker_id, path)
        else:
            key = tpu_key(node.zone, node.name, worker_id)
            self.network.place(key)
            self._serve_metadata(node, worker_id, path)
            metadata_port, inside = None, self.network.exec_prefix(key)
        env = vm_env(node, worker_id, root, metadata_port, path, self.rest_api)
        env[JOIN_ARGS_ENV] = shlex.join(join_args)
        env[BOOT_DELAY_ENV] = f"{self.boot_delay_of(node.cluster):g}"
        env.update(image_env(image))
        # The record first: it is the VM's lease, which the VM checks from its first second. It
        # keeps the metadata port, on which a restarted emulator serves the VM again.
        procs.write_record(
            path, machine_id=machine_id, cluster=node.cluster, node=node.name, worker_id=worker_id,
            started_at=time.time(), log=str(log_path), temp_dir=str(root), metadata_port=metadata_port,
        )
        children = start_guest(root, env, path, machine_id, procs.sim_owner(node.cluster), inside)
        with self._mutex:
            self._children.extend(children)
        return machine_id

    def _serve_metadata(self, node: Node, worker_id: int, path: Path, port: int = 0) -> int:
        assert self.metadata is not None
        hosts = lookup(node.accelerator_type).hosts
        endpoints = list(node.endpoints) or [LOOPBACK_IP] * hosts
        inside_vm = None
        if self.network is not None:  # the workers' internal addresses, its server at 169.254.169.254
            network, key = self.network, tpu_key(node.zone, node.name, worker_id)
            endpoints = [str(network.host(tpu_key(node.zone, node.name, w)).internal_ip) for w in range(hosts)]
            inside_vm = (network.namespace(key), lambda: network.metadata_socket(key))
        return self.metadata.start(zone=node.zone, node=node.name, worker=worker_id,
                                   accelerator=node.accelerator_type, endpoints=endpoints,
                                   megascale_file=path.with_suffix(".megascale"), port=port, inside_vm=inside_vm)

    def reattach(self, node: Node) -> None:
        """After an emulator restart: serve a READY node's running VMs their metadata again, on
        the ports they know, and boot those of its hosts that are not running."""
        if node.cluster is None or node.state is not NodeState.READY:
            return
        live = procs.machines()
        for worker_id in range(lookup(node.accelerator_type).hosts):
            path = record_path(node.cluster, node.name, worker_id)
            record = procs.read_record(path)
            if record is not None and record.get("machine_id") in live and self.metadata is not None:
                port = record.get("metadata_port")
                if port:
                    self._serve_metadata(node, worker_id, path, port=int(port))
        self.boot(node)

    def _reap(self) -> None:
        """Collect exited join processes (their daemons live on in the same machine)."""
        with self._mutex:
            self._children = [p for p in self._children if p.poll() is None]


def host_records(cluster: str) -> list[dict]:
    directory = paths.sim_cluster_dir(cluster) / HOSTS_DIR
    if not directory.exists():
        return []
    return [r for r in (procs.read_record(p) for p in sorted(directory.glob("*.json"))) if r]


def kill_node_hosts(cluster: str, node_name: str) -> int:
    """SIGKILL every simulated host of one node (a vanished VM); returns how many were running."""
    killed = 0
    with _locked(cluster):
        for path in sorted(hosts_dir(cluster).glob(f"{node_name}-w*.json")):
            record = procs.read_record(path)
            if record and record.get("node") == node_name and procs.kill(record.get("machine_id")):
                killed += 1
            _forget(path, record)
    return killed


def kill_host(cluster: str, node_name: str, worker_id: int) -> bool:
    """SIGKILL one simulated host (fault injection); its record stays, marked dead by Ray."""
    record = procs.read_record(record_path(cluster, node_name, worker_id))
    return bool(record) and procs.kill(record.get("machine_id"))


def kill_cluster_hosts(cluster: str) -> int:
    """SIGKILL every simulated host of the cluster, whatever process started them."""
    killed = 0
    with _locked(cluster):
        for path in sorted(hosts_dir(cluster).glob("*.json")):
            record = procs.read_record(path)
            if record and procs.kill(record.get("machine_id")):
                killed += 1
            _forget(path, record)
    return killed


def _forget(path: Path, record: dict | None) -> None:
    path.unlink(missing_ok=True)
    path.with_suffix(".megascale").unlink(missing_ok=True)
    if record:
        procs.remove_temp_dir(record.get("temp_dir"))


def vanished_hosts(cluster: str) -> set[tuple[str, int]]:
    """(node, worker) of recorded simulated hosts none of whose processes is running.

    The simulator's ground truth that a VM is gone, known at once; Ray itself needs
    1-4 s of failed health checks to declare the node dead.
    """
    records = host_records(cluster)
    if not records:
        return set()
    live = procs.machines()
    return {(r["node"], r["worker_id"]) for r in records if r.get("machine_id") not in live}


def host_pids(cluster: str) -> dict[tuple[str, int], list[int]]:
    """(node, worker) -> pids of that simulated host's processes (for benchmarks, tests)."""
    out: dict[tuple[str, int], list[int]] = {}
    for record in host_records(cluster):
        out[(record["node"], record["worker_id"])] = [p.pid for p in procs.members(record.get("machine_id"))]
    return out


class SimulatedMachines:
    """The simulated VMs of a cluster as the host controller sees them (`LocalMachines`)."""

    def check_room(self, spec: ClusterSpec) -> None:
        from podmanager.emulator.vm_room import check_room

        check_room(spec)

    def vanished(self, cluster: str) -> set[tuple[str, int]]:
        return vanished_hosts(cluster)

    def kill_all(self, cluster: str) -> int:
        return kill_cluster_hosts(cluster)

    def log_hint(self, cluster: str) -> str:
        return f"host logs: {hosts_dir(cluster)}/*.log"
