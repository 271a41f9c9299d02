"""Simulated TPU VMs: every host of a READY simulated slice becomes a real local Ray node.

`SimHostBooter` is a `SimCloud` listener, run by the emulator (the one process that owns
the simulated cloud). When a node turns READY and carries the head address in its metadata
("podmanager-head"), it launches one `python -m podmanager.hosts.join` per host, with the environment a TPU VM gives
(TPU_NAME, TPU_WORKER_ID, ...) so Ray labels the node exactly like a real host.
It returns at once: the hosts boot in parallel, each as a `procs` machine of the cluster's
owner, and outlive the process that started them. Each host's machine id is recorded in
`cluster_dir/<cluster>/hosts/<node>-w<i>.json` before it boots; when the node is preempted,
terminated, deleted or gone, its machines are SIGKILLed like a vanished VM. `kill_cluster_hosts` is what `stop` uses. A host whose
record is gone stops itself (`lease.py`): a lost state folder leaves no VM running.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator, Protocol

from podmanager.cloud.base import DEAD_STATES, Node, NodeState
from podmanager.core import paths
from podmanager.core.catalog import lookup
from podmanager.hosts import auth, procs
from podmanager.hosts.head import HEAD_METADATA_KEY, OBJECT_STORE_BYTES, free_port
from podmanager.hosts.loopback import LOOPBACK_IP
from podmanager.hosts.environments import CACHE_ENV
from podmanager.hosts.runs import MEGASCALE_FILE_ENV

log = logging.getLogger(__name__)

HOSTS_DIR = "hosts"
JOIN_DEADLINE_S = 120.0
GONE_STATES = DEAD_STATES | {NodeState.DELETING}


def hosts_dir(cluster: str) -> Path:
    path = paths.cluster_dir(cluster) / HOSTS_DIR
    path.mkdir(parents=True, exist_ok=True)
    return path


def record_path(cluster: str, node_name: str, worker_id: int) -> Path:
    return hosts_dir(cluster) / f"{node_name}-w{worker_id}.json"


def temp_dir(cluster: str, machine_id: str) -> str:
    """Ray's temp dir for one simulated host.

    Hosts on one machine in one session dir race for the same socket names
    (raylet.1, plasma_store.1) and crash with "Address already in use"; a dir per host
    avoids that. One per machine, not per slot: a VM that stops (and removes its dir) never
    takes the dir of a new VM in its place. Inside the cluster's (`procs.owner_temp_dir`),
    and short: Unix socket paths inside it are limited to 107 bytes.
    """
    return f"{procs.owner_temp_dir(cluster)}/{machine_id[:8]}"


def host_env(node: Node, worker_id: int) -> dict[str, str]:
    """The TPU identity a real VM of this slice would expose to Ray."""
    accelerator = lookup(node.accelerator_type)
    hostnames = list(node.endpoints) or ["127.0.0.1"] * accelerator.hosts
    return {
        "TPU_NAME": node.name,
        "TPU_WORKER_ID": str(worker_id),
        "TPU_ACCELERATOR_TYPE": node.accelerator_type,
        "TPU_TOPOLOGY": accelerator.topology,
        "TPU_WORKER_HOSTNAMES": ",".join(hostnames),
        "PODMANAGER_SIM_HOST": f"{node.cluster}/{node.name}/{worker_id}",
    }


def metadata_env(port: int, record: Path) -> dict[str, str]:
    """What points a simulated VM's processes at its own metadata server: JAX
    (GCE_METADATA_IP), Google's client libraries (GCE_METADATA_HOST), the host agent's
    notice watch; and where the agent leaves a run's MEGASCALE_* values for `tpu-env`."""
    address = f"{LOOPBACK_IP}:{port}"
    return {"GCE_METADATA_IP": address, "GCE_METADATA_HOST": address,
            MEGASCALE_FILE_ENV: str(record.with_suffix(".megascale"))}


class MetadataHost(Protocol):
    """Where the simulated VMs' metadata servers run (the emulator's `MetadataServers`)."""

    def start(self, *, zone: str, node: str, worker: int, accelerator: str, endpoints: list[str],
              megascale_file: Path, port: int = 0) -> int: ...

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

    Needs nothing but the files under `paths.home()`: the head address comes from
    the node's metadata, the token from the cluster's token file.
    """

    def __init__(self, *, object_store_memory: int = OBJECT_STORE_BYTES, num_cpus: int = 1,
                 metadata: MetadataHost | None = None) -> None:
        """`metadata`: where each VM's metadata server runs (without it, a VM has none)."""
        self.object_store_memory = object_store_memory
        self.num_cpus = num_cpus
        self.metadata = metadata
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
        """Launch the hosts of `node` that are not running yet; returns their machine ids."""
        head = node.metadata.get(HEAD_METADATA_KEY)
        cluster = node.cluster
        if not head or cluster is None:
            return []  # boot_hosts: false, or not a podmanager node
        token = auth.token_path(cluster)
        if not token.exists():
            log.warning("%s: no token file %s; its hosts cannot join", node.name, token)
            return []
        accelerator = lookup(node.accelerator_type)
        started: list[str] = []
        with _locked(cluster):
            live = procs.machines()  # one scan of the process table for all hosts of the node
            for worker_id in range(accelerator.hosts):
                path = record_path(cluster, node.name, worker_id)
                record = procs.read_record(path)
                if record is not None and record.get("machine_id") in live:
                    continue
                started.append(self._spawn(node, worker_id, head, token, accelerator.chips_per_host, path))
        return started

    def _spawn(self, node: Node, worker_id: int, head: str, token: Path, chips: int, path: Path) -> str:
        machine_id = procs.new_machine_id()
        vm_temp_dir = temp_dir(node.cluster, machine_id)
        command = [
            sys.executable, "-m", "podmanager.hosts.join",
            "--address", head,
            "--token-file", str(token),
            "--deadline", str(JOIN_DEADLINE_S),
            "--resources", f'{{"TPU": {chips}}}',
            "--num-cpus", str(self.num_cpus),
            "--object-store-memory", str(self.object_store_memory),
            "--temp-dir", vm_temp_dir,
            "--agent-port", str(free_port(LOOPBACK_IP)),
            "--light",
        ]
        # A new machine starts clean of Ray's own settings: when the booting process is itself a
        # Ray worker (a run's supervisor replacing a slice), they would make `ray start` refuse.
        clean = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        env = auth.child_env(token, base=clean)
        env.update(host_env(node, worker_id))
        # The VM's own disk for what it installs (a run's requirements): gone with the VM, so a
        # replaced slice installs afresh, as a new TPU VM does.
        env[CACHE_ENV] = str(Path(vm_temp_dir) / "podmanager-cache")
        log_path = path.with_suffix(".log")
        metadata_port = None
        if self.metadata is not None:
            metadata_port = self._serve_metadata(node, worker_id, path)
            env.update(metadata_env(metadata_port, path))
        # The record first: it is the VM's lease, which the VM checks from its first second. It
        # keeps the metadata port, on which a restarted emulator serves the VM again.
        procs.write_record(
            path, machine_id=machine_id, cluster=node.cluster, node=node.name, worker_id=worker_id,
            started_at=time.time(), log=str(log_path), temp_dir=vm_temp_dir, metadata_port=metadata_port,
        )
        holder = [sys.executable, "-m", "podmanager.hosts.sim.lease", "--lease", str(path), "--temp-dir", vm_temp_dir]
        owner = procs.owner(node.cluster)
        children = [procs.launch(command, env, log_path, machine_id, owner=owner)[0]]
        # The same machine: it dies with the host, and the host with it.
        children.append(procs.launch(holder, env, log_path, machine_id, owner=owner)[0])
        with self._mutex:
            self._children.extend(children)
        return machine_id

    def _serve_metadata(self, node: Node, worker_id: int, path: Path, port: int = 0) -> int:
        assert self.metadata is not None
        endpoints = list(node.endpoints) or [LOOPBACK_IP] * lookup(node.accelerator_type).hosts
        return self.metadata.start(zone=node.zone, node=node.name, worker=worker_id,
                                   accelerator=node.accelerator_type, endpoints=endpoints,
                                   megascale_file=path.with_suffix(".megascale"), port=port)

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
    directory = paths.cluster_dir(cluster) / HOSTS_DIR
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

    def vanished(self, cluster: str) -> set[tuple[str, int]]:
        return vanished_hosts(cluster)

    def kill_all(self, cluster: str) -> int:
        return kill_cluster_hosts(cluster)

    def log_hint(self, cluster: str) -> str:
        return f"host logs: {hosts_dir(cluster)}/*.log"
