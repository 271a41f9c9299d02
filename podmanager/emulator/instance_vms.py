"""Simulated Compute Engine instances that boot (the dry run's controller VM, issue 36).

`InstanceVms` is run by the emulator, which calls `reconcile` whenever the simulated cloud
changes and when an instance's next moment comes: an instance that is RUNNING and has a
`startup-script` in its metadata boots as a simulated TPU VM does (`vms.py`): a root folder of
its own (the same layout, on Debian 12's image; its cluster's `simulation.vm_image` unless its
metadata key `podmanager-sim-image` names one), a metadata server of its own (`instance_metadata.py`), the same fresh environment
(`vms.guest_env`, with $PODMANAGER_SIM_HOME), and its guest running the script with bash from its
root, all one `procs` machine holding a lease on its record
(`<sim_home>/sim/instances/<project>/<zone>/<name>.json`). When the instance goes (deleted:
STOPPING) its processes are SIGKILLed, everything it launched with them, and its root folder is
removed. After an emulator restart, `reattach` serves a running VM its metadata again on the port
it knows. `crash_controller` kills a cluster's controller VM and boots it again on the same root
folder, as GCE's automatic restart re-runs the startup script on the same disk. A stopped or
suspended instance's VM ends but keeps its root folder (`halt_controller`: the `sim
controller-stop` fault); started or resumed, it boots again on it. A reset instance
(instances.reset) stays RUNNING: its processes are killed and its boot runs again on the same
root folder, fetching its startup script as the instance's metadata has it now.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from podmanager.cloud.base import CLUSTER_LABEL
from podmanager.cloud.instances import CONTROLLER_ROLE, ROLE_LABEL, RUNNING, Instance
from podmanager.controller.startup import STARTUP_SCRIPT_KEY
from podmanager.core import paths
from podmanager.core.spec import DEFAULT_VM_IMAGE
from podmanager.emulator import rulebook
from podmanager.emulator.instance_metadata import InstanceFacts
from podmanager.emulator.metadata import MetadataServers
from podmanager.emulator.network.vm_network import VmNetwork, instance_key
from podmanager.emulator.sim.cloud import SimCloud
from podmanager.emulator.sim.instances import SimInstances
from podmanager.emulator.vms import (
    DEBIAN_12,
    guest_env,
    image_env,
    make_disk,
    start_guest,
)
from podmanager.vm import procs

log = logging.getLogger(__name__)

IMAGE_KEY = "podmanager-sim-image"  # instance metadata: the simulated image ("controller" or "bare")


def instances_dir(project: str) -> Path:
    return paths.sim_home() / "sim" / "instances" / paths.one_name(project, "project")


def record_path(project: str, zone: str, name: str) -> Path:
    return instances_dir(project) / paths.one_name(zone, "zone") / f"{paths.one_name(name, 'instance')}.json"


def owner_of(project: str, instance: Instance) -> str:
    """The VM's processes' owner tag: its cluster's simulated machines' (so `down` finds them) or,
    for an instance of no cluster, its own."""
    cluster = instance.labels.get(CLUSTER_LABEL)
    if cluster:
        return procs.sim_owner(cluster)
    return f"instance:{project}/{instance.zone}/{instance.name}@{paths.sim_home().resolve()}"


class InstanceVms:
    """The booted instances of the emulator's project, keyed "zone/name"."""

    def __init__(self, sim: SimCloud, metadata: MetadataServers):
        self.sim = sim
        self.metadata = metadata
        self.rest_api = ""  # the emulator's Secret Manager and storage REST root, as the VMs reach it
        self.index_url = ""  # the package index stand-in, as the VMs reach it ("": the index itself)
        self.network: VmNetwork | None = None  # the namespace mode's network (None: loopback)
        self._booted: dict[str, Instance] = {}
        self._resets: dict[str, int] = {}  # "zone/name" -> the resets its running VM has seen
        self._lock = threading.Lock()

    def _bootable(self) -> tuple[dict[str, Instance], set[str], dict[str, int], float | None]:
        """The instances that should be running a VM now, those stopped or suspended (their disks
        kept), how many times each running one was reset, and when the next one turns RUNNING or goes."""
        with self.sim.compute() as project:
            instances = SimInstances(project)
            listed = instances.instances(None, {})
            found = {f"{i.zone}/{i.name}": i for i in listed if i.status == RUNNING and STARTUP_SCRIPT_KEY in i.metadata}
            halted = {f"{i.zone}/{i.name}" for i in listed if i.status in (rulebook.TERMINATED, rulebook.SUSPENDED)}
            resets = {key: project.state.instances[key].resets for key in found}
            return found, halted, resets, instances.next_change()

    def reconcile(self) -> float | None:
        """Boot what should run and does not, stop what runs and should not, and boot again what
        was reset (instances.reset: its processes killed, its boot run again on the same root
        folder); returns the simulated time of the next instance change (None: none pending)."""
        wanted, halted, resets, due = self._bootable()
        with self._lock:
            for key, instance in wanted.items():
                if key in self._booted and self._resets.get(key, 0) != resets[key]:
                    self._kill(procs.read_record(record_path(self.sim.project, instance.zone, instance.name)) or {})
                    self._boot(instance)
                    log.info("instance %s reset", key)
            self._resets.update(resets)
            for key in [key for key in self._booted if key not in wanted]:
                instance = self._booted.pop(key)
                if key in halted:  # stopped or suspended: its processes end, its disk stays
                    self.metadata.stop_vm(key)
                    self._kill(procs.read_record(record_path(self.sim.project, instance.zone, instance.name)) or {})
                    log.info("instance %s halted", key)
                else:
                    self._halt(instance)
            for key, instance in wanted.items():
                if key not in self._booted:
                    self._boot(instance)
                    self._booted[key] = instance
        return due

    def reattach(self) -> None:
        """After an emulator restart: serve each recorded VM that still runs its metadata again, on
        its port; a VM whose instance is gone is stopped (`reconcile` boots the rest)."""
        wanted, halted, resets, _ = self._bootable()
        live = procs.machines()
        with self._lock:
            for path in sorted(instances_dir(self.sim.project).glob("*/*.json")):
                record = procs.read_record(path) or {}
                key = f"{record.get('zone')}/{record.get('name')}"
                instance = wanted.get(key)
                if instance is None and key in halted:
                    self._kill(record)  # its disk stays for its start
                elif instance is None:
                    self._forget(path, record)
                elif record.get("machine_id") in live:
                    self.metadata.serve_vm(key, InstanceFacts(sim=self.sim, zone=instance.zone, name=instance.name),
                                           port=int(record.get("metadata_port") or 0))
                    self._booted[key] = instance
                    self._resets[key] = resets[key]

    def crash_controller(self, cluster: str) -> str | None:
        """SIGKILL every process of `cluster`'s controller VM, then boot it again from the same root
        folder; its name, None when the cluster has no running controller VM."""
        with self._lock:
            for instance in self._booted.values():
                if instance.labels.get(CLUSTER_LABEL) == cluster and instance.labels.get(ROLE_LABEL) == CONTROLLER_ROLE:
                    self._kill(procs.read_record(record_path(self.sim.project, instance.zone, instance.name)) or {})
                    self._boot(instance)
                    return instance.name
        return None

    def halt_controller(self, cluster: str, state: str) -> str | None:
        """`cluster`'s controller VM stopped (TERMINATED) or SUSPENDED by Compute Engine itself, as a
        host error or a maintenance may: its processes end, its disk stays; its name, None when the
        cluster has no running controller VM."""
        with self._lock:
            found = [i for i in self._booted.values()
                     if i.labels.get(CLUSTER_LABEL) == cluster and i.labels.get(ROLE_LABEL) == CONTROLLER_ROLE]
        if not found:
            return None
        with self.sim.compute() as project:
            SimInstances(project).halt(found[0].zone, found[0].name, state)
        self.reconcile()
        return found[0].name

    def stop_all(self) -> None:
        """Stop every VM (an in-memory project's, which vanish with it)."""
        with self._lock:
            for instance in self._booted.values():
                self._halt(instance)
            self._booted.clear()

    def _boot(self, instance: Instance) -> None:
        """Boot the instance's VM: on the root folder its record names if it has one (a restart),
        else on a new one."""
        key = f"{instance.zone}/{instance.name}"
        path = record_path(self.sim.project, instance.zone, instance.name)
        before = procs.read_record(path) or {}
        owner = owner_of(self.sim.project, instance)
        machine_id = procs.new_machine_id()
        root = Path(before.get("temp_dir") or f"{procs.temp_dir_of(owner)}/{machine_id[:8]}")
        cluster = instance.labels.get(CLUSTER_LABEL)
        image = instance.metadata.get(IMAGE_KEY) or (self.sim.vm_image(cluster) if cluster else DEFAULT_VM_IMAGE)
        make_disk(root, image, DEBIAN_12, self.index_url)  # the controller VM's image (cloud/gcp/instances.py)
        facts = InstanceFacts(sim=self.sim, zone=instance.zone, name=instance.name)
        inside: list[str] = []
        if self.network is None:
            port: int | None = self.metadata.serve_vm(key, facts, port=int(before.get("metadata_port") or 0))
        else:  # its own namespace, its metadata server at 169.254.169.254 there
            network, where = self.network, instance_key(instance.zone, instance.name)
            network.place(where)
            self.metadata.serve_vm(key, facts, inside_vm=(network.namespace(where),
                                                          lambda: network.metadata_socket(where)))
            port, inside = None, network.exec_prefix(where)
        env = {**guest_env(root, port, self.rest_api), **image_env(image)}
        # The record first: it is the VM's lease, which the VM checks from its first second.
        path.parent.mkdir(parents=True, exist_ok=True)
        procs.write_record(path, machine_id=machine_id, zone=instance.zone, name=instance.name,
                           cluster=instance.labels.get(CLUSTER_LABEL), started_at=time.time(),
                           log=str(path.with_suffix(".log")), temp_dir=str(root), metadata_port=port,
                           boots=int(before.get("boots") or 0) + 1)
        start_guest(root, env, path, machine_id, owner, inside)
        log.info("instance %s booted (machine %s, root %s)", key, machine_id[:8], root)

    def _halt(self, instance: Instance) -> None:
        """The instance is gone: its VM's processes killed, its metadata server and root folder removed."""
        key = f"{instance.zone}/{instance.name}"
        self.metadata.stop_vm(key)
        path = record_path(self.sim.project, instance.zone, instance.name)
        self._forget(path, procs.read_record(path) or {})
        log.info("instance %s stopped", key)

    def _forget(self, path: Path, record: dict) -> None:
        self._kill(record)
        path.unlink(missing_ok=True)
        procs.remove_temp_dir(record.get("temp_dir"))

    @staticmethod
    def _kill(record: dict) -> None:
        """Every process of the VM, also what it launched as machines of its own (a Ray head)."""
        procs.kill(record.get("machine_id"))
        if record.get("temp_dir"):
            procs.kill_inside(record["temp_dir"])
