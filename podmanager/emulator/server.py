"""The emulator process: one project's simulated cloud, served and kept.

`Emulator` holds the `SimCloud` in memory and is the only thing that moves it:
- it serves it as the Cloud TPU API and the control service (`tpu_api.TpuEmulator`);
- a ticker thread applies every transition when its time comes (a preemption after its
  notice, a scripted fault, the end of a repair), with no client asking, and saves the state
  when it changed (`state_file`);
- node changes go, in order, to the simulated hosts (`emulator/vms.SimHostBooter`), which
  boot and kill the VMs; a queue keeps their process spawning out of the API's lock;
- each VM's metadata server runs here (`metadata.MetadataServers`), from memory;
- a watcher boots the Compute Engine instances that have a startup script when they turn
  RUNNING, and kills them when they go (`instance_vms.InstanceVms`: the controller VM);
- Secret Manager is served on the same gRPC port; its REST route and Cloud Storage's
  download route over the simulated buckets (`storage.py`), what a VM's startup script
  fetches, on a port of their own;
- in the loopback mode, the VMs' package index stand-in (`package_index.py`): their PyPI.

Started in the background by the first command that needs it (`emulator/launcher`):
`python -m podmanager.emulator --project P [--port N]`. It writes its record (`record.py`)
once it serves and removes it when it stops; it stops on SIGTERM/SIGINT, and by itself
when its record is gone (the state folder deleted), so a lost folder leaks no emulator.
"""

from __future__ import annotations

import argparse
import logging
import os
import queue
import signal
import threading
import time

import psutil

from podmanager.cloud.base import Node, NodeState
from podmanager.cloud.errors import NotFoundError
from podmanager.core.clock import Clock
from podmanager.core.files import write_atomic
from podmanager.core.spec import SIM_NETWORK_ENV
from podmanager.emulator import discovery, rest, state_file, storage
from podmanager.emulator import record as emulator_record
from podmanager.emulator.compute_api import ComputeApi
from podmanager.emulator.iam import tokens
from podmanager.emulator.iam.api import IamApi
from podmanager.emulator.iam.gate import Gate, GateInterceptor
from podmanager.emulator.iam.project import ProjectIam, ProjectPolicy
from podmanager.emulator.instance_vms import InstanceVms
from podmanager.emulator.metadata import MetadataServers
from podmanager.emulator.network import names
from podmanager.emulator.network.vm_network import VmNetwork
from podmanager.emulator.package_index import IndexStandIn
from podmanager.emulator.secret_manager import SecretManagerEmulator
from podmanager.emulator.sim.cloud import SIMULATED_PROJECT_NUMBER, SimCloud
from podmanager.emulator.tpu_api import TpuEmulator
from podmanager.emulator.vms import SimHostBooter, shared_uv_cache

log = logging.getLogger(__name__)

RECORD_CHECK_S = 2.0  # how often a background emulator checks that its record still names it
INSTANCE_WATCH_S = 60.0  # the longest the instance watcher sleeps with nothing changing (it wakes on a change)
INSTANCE_RETRY_S = 1.0  # after a failed boot
LOOPBACK, NAMESPACES = "loopback", "namespaces"
NETWORK_MODES = (LOOPBACK, NAMESPACES)
NETWORK_ENV = SIM_NETWORK_ENV  # the background emulator's network mode (issue 47: opt-in for now)


class Emulator:
    """One simulated project, served: `start()`, then `stop()` (also on failure)."""

    def __init__(self, project: str, *, persist: bool, create_latency_s: float = 0.5,
                 delete_latency_s: float = 0.1, clock: Clock | None = None, network: str = LOOPBACK):
        """`persist`: carry on from the project's saved state and save it on change (the
        background emulator); else an in-memory project (`podmanager emulator`, tests).
        `network`: "loopback" (every VM on this machine's addresses) or "namespaces" (each VM
        in its own network namespace on the simulated VPC, behind its firewall: `network/`)."""
        if network not in NETWORK_MODES:
            raise ValueError(f"network {network!r}: choose one of {', '.join(NETWORK_MODES)}")
        self.project = project
        self.network_mode = network
        self.network: VmNetwork | None = None
        self.persist = persist
        state = state_file.load(project) if persist else None
        self.sim = SimCloud(project, state=state, create_latency_s=create_latency_s,
                            delete_latency_s=delete_latency_s, listeners=[self._heard], clock=clock)
        self.metadata = MetadataServers(self.sim)
        self.booter = SimHostBooter(metadata=self.metadata, image_of=self.sim.vm_image,
                                    boot_delay_of=self.sim.boot_delay)
        self.instance_vms = InstanceVms(self.sim, self.metadata)
        secrets = SecretManagerEmulator({project: SIMULATED_PROJECT_NUMBER},
                                        saved_at=state_file.secrets_path(project) if persist else None)
        self.api = TpuEmulator(self.sim, secrets,
                               controls={"crash_controller_vm": lambda r: self.instance_vms.crash_controller(r.cluster),
                                         "halt_controller_vm": lambda r: self.instance_vms.halt_controller(
                                             r.cluster, r.state),
                                         "project": lambda r: self.change_project(**dict(r)),
                                         "move_laptop": lambda r: self.move_laptop()})
        # Every call is someone's, checked against the project's IAM and enabled APIs (issue 45).
        self.iam = ProjectIam.load(project, SIMULATED_PROJECT_NUMBER, persist=persist)
        tokens.write_user_credentials()  # the laptop's user: the simulated application default credentials
        secrets.gated = True
        self.gate = Gate(self.iam, self._resource_bindings)
        self.api.interceptors.append(GateInterceptor(self.gate))
        self.api.controls["iam_calls"] = lambda r: self.gate.calls_made(r.methods)  # who made each call
        # Compute Engine's network calls, logged with the Cloud TPU requests (one log to assert on).
        self.compute = ComputeApi(self.sim, log=lambda method, request: self.api.requests.append((method, request)))
        self.stopped = threading.Event()
        self._changes: queue.Queue[tuple[Node | None, Node | None] | None] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._server = None
        self._rest = None
        self.index: IndexStandIn | None = None
        self.rest_port = 0  # the REST routes a VM's startup script uses: its token, podmanager's wheel

    def _heard(self, before: Node | None, after: Node | None) -> None:
        self._changes.put((before, after))

    def start(self, host: str = "127.0.0.1", port: int = 0, *, any_port_if_taken: bool = False) -> int:
        """Serve on host:port (0: any free port); returns the port. `any_port_if_taken`: a
        restarted emulator wants its old port back, but takes another rather than fail."""
        self._start_network()
        self._serve_index()
        for node in self.sim.all_nodes():  # VMs that ran before a restart get their metadata back
            self.booter.reattach(node)
        self.instance_vms.reattach()
        try:
            self._server, bound = self.api.serve(host, port)
        except OSError:
            if port == 0 or not any_port_if_taken:
                raise
            self._server, bound = self.api.serve(host, 0)
        threads = [(self._deliver, "emulator-vms"), (self._tick, "emulator-ticker"),
                   (self._watch_instances, "emulator-instances")]
        if self.network is not None:
            self.network.relay_google_apis([bound])
            network = self.network
            threads.append((lambda: network.keep_in_step(self.stopped), "emulator-network"))
        for target, name in threads:
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return bound

    def serve_rest(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Serve the REST routes a VM's startup script uses on one port, returned: Secret Manager's
        access (`secrets_api`: its /v1) and Cloud Storage's downloads (`storage_api`: its root);
        and Compute Engine's network calls and Cloud Storage's bucket calls the preflight makes
        (`compute_api`, `storage_api`: its root)."""
        self._rest, self.rest_port = rest.serve([self.api.secrets.rest_access, storage.download], host, port,
                                                request_routes=[self.compute, storage.BucketApi(self.sim),
                                                                IamApi(self.gate)], iam=self._checked)
        self._point_vms_at_rest()
        return self.rest_port

    def _point_vms_at_rest(self) -> None:
        """Where the VMs' scripts reach the REST routes: this machine's loopback, or in the
        namespace mode the internet segment's Google API address, relayed here."""
        if not self.rest_port:
            return
        host = "127.0.0.1"
        if self.network is not None:
            self.network.relay_google_apis([self.rest_port])
            host = str(self.network.google_apis)
        self.booter.rest_api = f"http://{host}:{self.rest_port}"
        self.instance_vms.rest_api = self.booter.rest_api

    def _serve_index(self) -> None:
        """The VMs' package index stand-in, in the loopback mode (a VM in a namespace of its own
        cannot reach this machine's loopback: it reads the index itself, through the NAT)."""
        if self.network is not None or self.index is not None:
            return
        self.index = IndexStandIn.for_this_machine(shared_uv_cache() / "index")
        self.booter.index_url = self.instance_vms.index_url = self.index.start()

    def laptop_public(self) -> str:
        """This machine's address on the simulated internet (namespace mode), "" in the loopback mode."""
        public = self.network.fabric.laptop_public if self.network is not None else None
        return str(public) if public is not None else ""

    def move_laptop(self) -> str:
        """The namespace mode: the laptop's home router gets another public address (its provider
        changed it, or another network), and the emulator's record says so (a later `up` admits
        that one); the new address. Where the cluster's channel rule still admits only the old
        one, the laptop's connections to the controller go unanswered until `access add`."""
        if self.network is None:
            raise ValueError("the laptop's address changes only in the namespace mode (simulation.network: namespaces)")
        moved = str(self.network.move_laptop())
        path = emulator_record.record_path(self.project)
        try:
            kept = emulator_record.EmulatorRecord.model_validate_json(path.read_text())
        except (OSError, ValueError):
            kept = None
        if kept is not None and kept.pid == os.getpid():
            write_atomic(path, kept.model_copy(update={"laptop_public": moved}).model_dump_json())
        return moved

    def _start_network(self) -> None:
        """The namespace mode's network, before any VM boots; where namespaces cannot be made
        the loopback mode stays, and the log says why, once."""
        if self.network_mode != NAMESPACES or self.network is not None:
            return
        why = names.unavailable()
        if why is not None:
            log.warning("simulated network: staying with the loopback mode (%s); docs/dry-run.md says what it "
                        "does not rehearse", why)
            return
        self.network = VmNetwork(self.sim)  # its start removes what crashed emulators left (names.py)
        try:
            self.network.start()
        except BaseException:
            self.network.stop()
            self.network = None
            raise
        self.booter.network = self.instance_vms.network = self.network
        self._point_vms_at_rest()

    def _resource_bindings(self, resource: str) -> list[tuple[str, list[str]]]:
        """A resource's own IAM bindings, which count beside the project's: a bucket's or a secret's."""
        if not resource.startswith("projects/_/buckets/"):
            return self.api.secrets.bindings_of(resource)
        try:
            with self.sim.storage() as storage:
                policy = storage.bucket(resource.split("/")[3])
        except NotFoundError:
            return []  # the call itself answers 404
        return [(binding.role, list(binding.members)) for binding in policy.bindings]

    def _checked(self, request: rest.Request) -> rest.Answer | None:
        """The gate's refusal of a REST request, as Google's JSON; None lets it through."""
        denial = self.gate.rest(request.method, request.path, request.headers, request.body)
        return None if denial is None else rest.Answer(denial.http, denial.json_body())

    def change_project(self, kind: str | None = None, grant: str | None = None, revoke: str | None = None,
                       member: str | None = None, enable: list[str] | None = None) -> ProjectPolicy:
        """What the console would do to the project (`podmanager sim project`): start it again as
        `kind`, grant or revoke a role of `member`, enable APIs; the policy as it is then."""
        if kind:
            self.iam.set_kind(kind)
        for role, change in ((grant, self.iam.grant), (revoke, self.iam.revoke)):
            if role:
                if not member:
                    raise ValueError("--member is needed with --grant and --revoke")
                change(role, member)
        for service in enable or []:
            self.iam.enable(service)
        return self.iam.policy()

    def stop(self) -> None:
        self.stopped.set()
        with self.sim.changed:
            self.sim.changed.notify_all()
        self._changes.put(None)
        if self._server is not None:
            self._server.stop(grace=None)
        if self._rest is not None:
            self._rest.shutdown()
            self._rest.server_close()
        for thread in self._threads:
            thread.join(timeout=10)
        if not self.persist:
            self.instance_vms.stop_all()  # an in-memory project's VMs vanish with it
        self.metadata.stop_all()
        if self.network is not None:  # its namespaces, and whatever still runs in them, go with it
            self.network.stop()
        if self.index is not None:
            self.index.stop()
        if self.persist:
            state_file.save(self.project, self.sim)

    def _deliver(self) -> None:
        """Node changes to the simulated hosts, in the order they happened."""
        while True:
            change = self._changes.get()
            if change is None:
                return
            self.deliver(*change)

    def deliver(self, before: Node | None, after: Node | None) -> None:
        """One node change to the simulated hosts; a node's VMs boot only if it is READY still.
        Boots queue up behind each other (a thousand slices turn READY faster than their VMs
        start): a node deleted meanwhile (`down`, an interrupted `up`'s cleanup) or no longer
        READY must not boot from a stale change, or `down` would race an endless queue of boots."""
        if after is not None and after.state is NodeState.READY:
            now = self.sim.node_record(after.zone, after.name)
            if now is None or now.state is not NodeState.READY:
                log.info("not booting the VMs of %s: it is %s now", after.name, now.state.value if now else "gone")
                return
        self.booter(before, after)

    def _watch_instances(self) -> None:
        """Boot and stop the instances' VMs whenever the cloud changed or an instance's moment comes."""
        while not self.stopped.is_set():
            version = self.sim.version()
            try:
                due = self.instance_vms.reconcile()
            except Exception:  # noqa: BLE001 - a failed boot must not stop the watcher
                log.exception("simulated instances: reconciling failed")
                due = self.sim.clock.now() + INSTANCE_RETRY_S
            wait = INSTANCE_WATCH_S if due is None else max(0.0, due - self.sim.clock.now())
            if not self.stopped.is_set():
                self.sim.wait_for_change(version, min(wait, INSTANCE_WATCH_S))

    def _tick(self) -> None:
        """Apply what is due when it is due; save the state when it changed."""
        last_save = 0.0
        while not self.stopped.is_set():
            with self.sim.changed:
                due = self.sim.tick()
                wait = state_file.SAVE_EVERY_S
                if due is not None:
                    wait = min(wait, max(0.0, due - self.sim.clock.now()))
                if wait > 0 and not self.stopped.is_set():
                    self.sim.changed.wait(wait)
            if self.persist and time.monotonic() - last_save >= state_file.SAVE_EVERY_S:
                state_file.save(self.project, self.sim)
                last_save = time.monotonic()


def _write_record(project: str, address: str, rest_root: str, laptop_public: str = "") -> None:
    me = psutil.Process()
    record = emulator_record.EmulatorRecord(project=project, address=address, secrets_api=f"{rest_root}/v1",
                                            storage_api=rest_root, compute_api=rest_root, buckets_api=rest_root,
                                            laptop_public=laptop_public, pid=me.pid, started=me.create_time())
    write_atomic(emulator_record.record_path(project), record.model_dump_json())


def _still_ours(project: str) -> bool:
    found = emulator_record.read(project)
    return found is not None and found.pid == os.getpid()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m podmanager.emulator", description=__doc__.splitlines()[0])
    parser.add_argument("--project", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="the port to serve on (0: any; taken: any)")
    parser.add_argument("--network", choices=NETWORK_MODES, default=os.environ.get(NETWORK_ENV) or LOOPBACK,
                        help=f"the simulated VMs' network (default: ${NETWORK_ENV}, else loopback)")
    opts = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    emulator = Emulator(opts.project, persist=True, network=opts.network)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: emulator.stopped.set())
    try:
        rest_port = emulator.serve_rest(opts.host)  # first: VMs booted again at start read their token by it
        port = emulator.start(opts.host, opts.port, any_port_if_taken=True)
        _write_record(opts.project, f"{opts.host}:{port}", f"http://{opts.host}:{rest_port}", emulator.laptop_public())
        discovery.warm()  # Google's API definitions, which every request is checked against
        log.info("serving the simulated project %s on %s:%d", opts.project, opts.host, port)
        while not emulator.stopped.wait(RECORD_CHECK_S):
            if not _still_ours(opts.project):
                log.info("my record is gone (the state folder was deleted or another emulator took over); stopping")
                break
    finally:
        emulator.stop()
        if _still_ours(opts.project):
            emulator_record.record_path(opts.project).unlink(missing_ok=True)
        log.info("stopped")
