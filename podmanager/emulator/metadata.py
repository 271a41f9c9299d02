"""The GCE metadata servers of the simulated TPU VMs, as a TPU program and Ray see them.

A real TPU VM answers `http://metadata.google.internal/computeMetadata/v1/...` (only with
the header `Metadata-Flavor: Google`; 403 without): which worker it is, the slice's workers,
its accelerator type, `tpu-env`, and whether it is about to be preempted or maintained.
The emulator serves one of these per simulated host on loopback (the host's processes find
it through `GCE_METADATA_IP`), from its own memory: preemption and maintenance are the
simulated cloud's state as it is now, and a long poll (`wait_for_change`) wakes when that
state changes. `MetadataServers` starts one per VM when the VM boots, stops it when the VM
goes, and serves a VM again on its recorded port when the emulator restarts. Guest attributes
follow Google's rules (`rulebook.py`): a write is refused (403) unless the VM's metadata turns them
on, and writes beyond the rate are dropped (logged here).
"""

from __future__ import annotations

import hashlib
import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Protocol
from urllib.parse import parse_qs, urlparse

from podmanager.cloud.base import NodeState
from podmanager.cloud.errors import CloudError
from podmanager.core.local_ports import LOOPBACK_IP
from podmanager.core.peer import OwnerOnlyRequests
from podmanager.emulator import rulebook
from podmanager.emulator.iam import tokens
from podmanager.emulator.network.sockets import inside
from podmanager.emulator.sim.cloud import SIMULATED_PROJECT_NUMBER, SimCloud
from podmanager.emulator.sim.records import NodeRecord

log = logging.getLogger(__name__)

PREFIX = "/computeMetadata/v1/"
GUEST_ATTRIBUTES = "instance/guest-attributes/"
ATTRIBUTES = "instance/attributes/"
LONG_POLL_S = 60.0
# A GCE metadata server's root lists its one version, "computeMetadata/"; google-auth's ping
# asks it for a 200 with the Metadata-Flavor header
# (https://cloud.google.com/compute/docs/metadata/querying-metadata).
ROOT_LISTING = "computeMetadata/\n"
# The VM's service account, read whole (recursive=true: its email, aliases and scopes), as the
# predefined keys list it (https://cloud.google.com/compute/docs/metadata/predefined-metadata-keys).
SERVICE_ACCOUNT = "instance/service-accounts/default"
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
# The answers that are JSON, sent as such: google-auth parses a body only when its type says JSON.
TEXT, JSON = "application/text", "application/json"
JSON_PATHS = {SERVICE_ACCOUNT, f"{SERVICE_ACCOUNT}/token"}
# A VM's interfaces; read whole (recursive=true), a JSON list with each one's ip, network and
# access configs, which is how podmanager asks whether it runs inside the cluster's network
# (https://cloud.google.com/compute/docs/metadata/predefined-metadata-keys).
NETWORK_INTERFACES = "instance/network-interfaces"
# How often a server's loop looks for a shutdown: http.server's default (0.5 s) would make
# stopping an emulator with many VMs, or a VM's metadata with it, take seconds.
SHUTDOWN_POLL_S = 0.05


class SimulatedVm:
    """The facts one simulated VM's metadata serves."""

    def __init__(self, *, sim: SimCloud, zone: str, node: str, worker: int, accelerator: str,
                 endpoints: list[str], megascale_file: Path | None):
        self.sim = sim
        self.zone, self.node, self.worker = zone, node, worker
        self.accelerator = accelerator
        self.endpoints = endpoints
        self.megascale_file = megascale_file

    def _record(self) -> NodeRecord | None:
        return self.sim.node_record(self.zone, self.node)

    def preempted(self) -> str:
        record = self._record()
        return "TRUE" if record and (record.preempt_notice or record.state == NodeState.PREEMPTED) else "FALSE"

    def maintenance_event(self) -> str:
        """Compute Engine fills `maintenance-event` only for VMs that live-migrate or have GPUs; a
        TPU VM is neither (it terminates on maintenance), so this stays NONE: TPU maintenance is
        announced through `upcoming-maintenance`."""
        return "NONE"

    def upcoming_maintenance(self) -> str:
        """`instance/upcoming-maintenance` as GCE documents it (snake_case fields, RFC 3339 times):
        PENDING from the simulator's announcement until the window opens, ONGOING while the node is
        REPAIRING; with none, the documented empty object."""
        record = self._record()
        if record is None:
            return "{}"
        if record.maintenance_at is not None:
            status, start, end = "PENDING", record.maintenance_at, record.maintenance_at + record.maintenance_s
        elif record.state == NodeState.REPAIRING:
            now = self.sim.clock.now()
            status, start, end = "ONGOING", now, max(now, record.repaired_at or now)
        else:
            return "{}"
        return json.dumps({
            "can_reschedule": "false", "latest_window_start_time": _rfc3339(start),
            "maintenance_status": status, "type": "UNSCHEDULED",
            "window_end_time": _rfc3339(end), "window_start_time": _rfc3339(start),
        }, sort_keys=True)

    def maintenance_values(self) -> dict[str, Callable[[], str]]:
        """The maintenance keys, apart from `value`'s table so each grows on its own."""
        return {"instance/upcoming-maintenance": self.upcoming_maintenance}

    def tpu_env(self) -> str:
        values = {"ACCELERATOR_TYPE": self.accelerator, "NODE_ID": self.node, "WORKER_ID": str(self.worker),
                  "ZONE": self.zone}
        if self.megascale_file is not None and self.megascale_file.exists():
            values.update(json.loads(self.megascale_file.read_text()))
        return "".join(f"{key}: '{value}'\n" for key, value in values.items())

    def attribute(self, key: str) -> str | None:
        """One entry of the node's metadata as it is now (the startup script, the head's address
        `up` may have updated, ...): what a VM reads at instance/attributes/KEY."""
        record = self._record()
        return record.metadata.get(key) if record else None

    def service_account_email(self) -> str:
        record = self._record()
        account = record.network.service_account if record and record.network else None
        return account or default_service_account()

    def access_token(self) -> str:
        return access_token(self.service_account_email())

    def value(self, path: str) -> str | None:
        """The value at `path` (below computeMetadata/v1/), or None for a 404."""
        fixed = {
            "project/project-id": lambda: self.sim.project,
            "project/numeric-project-id": lambda: SIMULATED_PROJECT_NUMBER,
            "instance/service-accounts/default/email": self.service_account_email,
            "instance/service-accounts/default/token": self.access_token,
            "instance/attributes/instance-id": lambda: self.node,  # the TPU node's name, as Ray reads it
            "instance/attributes/agent-worker-number": lambda: str(self.worker),
            "instance/attributes/worker-network-endpoints": lambda: ",".join(self.endpoints),
            "instance/attributes/accelerator-type": lambda: self.accelerator,
            "instance/attributes/tpu-env": self.tpu_env,
            "instance/id": lambda: str(int(hashlib.sha1(f"{self.node}/{self.worker}".encode()).hexdigest()[:15], 16)),
            "instance/hostname": lambda: f"{self.node}-w-{self.worker}",
            "instance/zone": lambda: f"projects/0/zones/{self.zone}",
            "instance/preempted": self.preempted,
            "instance/maintenance-event": self.maintenance_event,
        }
        answer = fixed.get(path.strip("/")) or self.maintenance_values().get(path.strip("/"))
        if answer is None and path.startswith(GUEST_ATTRIBUTES):
            return self.guest_attribute(path[len(GUEST_ATTRIBUTES):])
        if answer is None and path.startswith(ATTRIBUTES):
            return self.attribute(path[len(ATTRIBUTES):].strip("/"))
        return answer() if answer else None

    def guest_attribute(self, path: str) -> str | None:
        found = self.sim.guest_attributes(self.zone, self.node, path, worker=self.worker) if "/" in path else []
        return found[0].value if len(found) == 1 else None

    def put_guest_attribute(self, path: str, value: str) -> None:
        """`PUT instance/guest-attributes/NAMESPACE/KEY` (`path`); CloudError for a bad path."""
        self.sim.set_guest_attribute(self.zone, self.node, self.worker, path, value)

    def guest_attributes_enabled(self) -> bool:
        """The node's metadata turns them on (the simulated project has no project-wide metadata)."""
        record = self._record()
        return rulebook.guest_attributes_enabled(record.metadata if record else {}, {})


def default_service_account() -> str:
    """The project's default compute service account, which a VM asked for without one runs as."""
    return f"{SIMULATED_PROJECT_NUMBER}-compute@developer.gserviceaccount.com"


def access_token(email: str) -> str:
    """A VM's service-account token as the metadata server hands it out: what the simulated Secret
    Manager and storage accept, standing for the account (`iam/tokens.py`)."""
    return tokens.metadata_token(email)


class MetadataFacts(Protocol):
    """What one VM's metadata server serves: a TPU VM's (`SimulatedVm`) or a Compute Engine
    instance's (`instance_metadata.InstanceFacts`)."""

    sim: SimCloud

    def value(self, path: str) -> str | None: ...

    def put_guest_attribute(self, path: str, value: str) -> None: ...

    def guest_attributes_enabled(self) -> bool: ...


def handler_for(vm: MetadataFacts, namespace: str | None = None) -> type[BaseHTTPRequestHandler]:
    """`namespace`: the network namespace the server listens in (its callers' sockets are
    looked up there), None for this machine's own."""
    rate = rulebook.GuestAttributeRate()  # this VM's writes

    class Handler(OwnerOnlyRequests):  # only the owner's processes: the token it serves reads the Ray token
        def parse_request(self) -> bool:
            if namespace is None:
                return super().parse_request()
            with inside(namespace):  # the kernel answers who owns a socket of its own namespace only
                return super().parse_request()

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            url = urlparse(self.path)
            if self.headers.get("Metadata-Flavor") != "Google":
                return self._send(403, "Missing required header: Metadata-Flavor: Google\n")
            if url.path == "/":  # what google-auth's ping asks for: the server's top listing
                return self._send(200, ROOT_LISTING)
            if not url.path.startswith(PREFIX):
                return self._send(404, "not found\n")
            path = url.path[len(PREFIX):]
            value = vm.value(path)
            query = parse_qs(url.query)
            recursive = query.get("recursive", ["false"])[0].lower() == "true"
            if value is None and path.strip("/") == SERVICE_ACCOUNT:
                value = _service_account(vm)  # google-auth reads it before each token (recursive=true)
            if value is None and path.strip("/") == NETWORK_INTERFACES:
                value = _network_interfaces(vm, recursive)
            if value is None:
                return self._send(404, "not found\n")
            if query.get("wait_for_change", ["false"])[0].lower() == "true":
                value = self._wait_for_change(path, value, query)
            whole = path.strip("/") in JSON_PATHS or (recursive and path.strip("/") == NETWORK_INTERFACES)
            self._send(200, value, JSON if whole else TEXT)

        def do_PUT(self) -> None:  # noqa: N802 - http.server's name
            """A guest attribute the VM writes (`instance/guest-attributes/NAMESPACE/KEY`): what
            a startup script reports its boot with, read through the API's GetGuestAttributes."""
            url = urlparse(self.path)
            if self.headers.get("Metadata-Flavor") != "Google":
                return self._send(403, "Missing required header: Metadata-Flavor: Google\n")
            where = url.path[len(PREFIX):] if url.path.startswith(PREFIX) else ""
            if not where.startswith(GUEST_ATTRIBUTES):
                return self._send(405, "only guest attributes can be written\n")
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
            if not vm.guest_attributes_enabled():
                return self._send(403, f"{rulebook.GUEST_ATTRIBUTES_DISABLED}\n")
            if not rate.admit(vm.sim.clock.now()):  # dropped as Google may, and said so here
                log.warning("guest attribute write %s dropped: over the rate of %d a minute, %d a second per VM",
                            where, rulebook.GUEST_ATTRIBUTE_WRITES_PER_MINUTE, rulebook.GUEST_ATTRIBUTE_WRITES_PER_SECOND)
                return self._send(200, "")
            try:
                vm.put_guest_attribute(where[len(GUEST_ATTRIBUTES):], body)
            except CloudError as bad:
                return self._send(400, f"{bad}\n")
            self._send(200, "")

        def _wait_for_change(self, path: str, first: str, query: dict[str, list[str]]) -> str:
            """The long poll: answer when the value differs from `last_etag`'s (or the first
            seen), or after `timeout_sec`."""
            deadline = time.monotonic() + float(query.get("timeout_sec", [LONG_POLL_S])[0])
            seen = query.get("last_etag", [_etag(first)])[0]
            while True:
                version = vm.sim.version()
                value = vm.value(path) or ""  # read without holding the simulator: it may read a file
                left = deadline - time.monotonic()
                if _etag(value) != seen or left <= 0:
                    return value
                vm.sim.wait_for_change(version, min(left, 1.0))  # 1 s: a megascale file written meanwhile

        def refuse(self, reason: str) -> None:
            self._send(403, f"{reason}\n")

        def _send(self, code: int, body: str, kind: str = TEXT) -> None:
            data = body.encode()
            try:
                self.send_response(code)
                self.send_header("Metadata-Flavor", "Google")
                self.send_header("Content-Type", kind)
                self.send_header("ETag", _etag(body))
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the caller left (its VM was killed mid long poll): nobody to answer, nothing to log

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's signature
            pass  # a TPU program polls this; its log would fill the host's

    return Handler


def _service_account(vm: MetadataFacts) -> str | None:
    """The account's entry as JSON. The simulated VMs hold the cloud-platform scope: the
    documentation is silent on what scopes a caller sees for a TPU VM, and access is decided by
    IAM, which the emulator checks on every call."""
    email = vm.value(f"{SERVICE_ACCOUNT}/email")
    if email is None:
        return None
    return json.dumps({"aliases": ["default"], "email": email, "scopes": [CLOUD_PLATFORM_SCOPE]})


def _network_interfaces(vm: MetadataFacts, recursive: bool) -> str | None:
    """The VM's one interface: listed (`0/`), or read whole as GCE gives it (its ip, network and
    external address); None for a VM whose metadata names no interface."""
    interface = f"{NETWORK_INTERFACES}/0"
    ip, network = vm.value(f"{interface}/ip"), vm.value(f"{interface}/network")
    if ip is None or network is None:
        return None
    if not recursive:
        return "0/\n"
    external = vm.value(f"{interface}/access-configs/0/external-ip")
    access = [{"externalIp": external, "type": "ONE_TO_ONE_NAT"}] if external else []
    return json.dumps([{"accessConfigs": access, "ip": ip, "network": network}], sort_keys=True)


def _rfc3339(when: float) -> str:
    return datetime.fromtimestamp(when, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _etag(value: str) -> str:
    return hashlib.sha1(value.encode()).hexdigest()[:16]


def serve(vm: MetadataFacts, port: int, host: str = LOOPBACK_IP) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((host, port), handler_for(vm))
    server.daemon_threads = True
    return server


def serve_on(vm: MetadataFacts, bound: socket.socket, namespace: str) -> ThreadingHTTPServer:
    """A server on a socket already bound inside a VM's namespace (its 169.254.169.254:80)."""
    server = ThreadingHTTPServer(bound.getsockname()[:2], handler_for(vm, namespace), bind_and_activate=False)
    server.socket.close()
    server.socket = bound
    server.server_activate()
    server.daemon_threads = True
    return server


class MetadataServers:
    """Every simulated VM's metadata server, in the emulator's process (the simulated hosts'
    `MetadataHost`): started when a VM boots, stopped when it goes."""

    def __init__(self, sim: SimCloud):
        self.sim = sim
        # "zone/node/worker" (a TPU VM) or "instances/zone/name" -> its server
        self._servers: dict[str, ThreadingHTTPServer] = {}
        self._lock = threading.Lock()

    def start(self, *, zone: str, node: str, worker: int, accelerator: str, endpoints: list[str],
              megascale_file: Path, port: int = 0,
              inside_vm: tuple[str, Callable[[], socket.socket]] | None = None) -> int:
        """Serve one VM's metadata on `port` (0: any free port, or the one it had before a
        restart); returns the port. `inside_vm`: as `serve_vm`'s."""
        vm = SimulatedVm(sim=self.sim, zone=zone, node=node, worker=worker, accelerator=accelerator,
                         endpoints=endpoints, megascale_file=megascale_file)
        return self.serve_vm(f"{zone}/{node}/{worker}", vm, port, inside_vm)

    def serve_vm(self, key: str, vm: MetadataFacts, port: int = 0,
                 inside_vm: tuple[str, Callable[[], socket.socket]] | None = None) -> int:
        """Serve `vm`'s metadata as `key` (replacing what served it before) on `port`; returns the port.
        `inside_vm`: (the VM's namespace, what binds its socket there) in the namespace mode,
        where the VM finds its server at 169.254.169.254 (`network/vm_network.py`)."""
        with self._lock:
            old = self._servers.pop(key, None)
        if old is not None:
            _close(old)  # first: a VM booted again keeps its port
        server = serve(vm, port) if inside_vm is None else serve_on(vm, inside_vm[1](), inside_vm[0])
        threading.Thread(target=server.serve_forever, args=(SHUTDOWN_POLL_S,), name=f"metadata-{key}",
                         daemon=True).start()
        with self._lock:
            self._servers[key] = server
        return server.server_address[1]

    def stop(self, zone: str, node: str) -> None:
        """Stop the metadata servers of every worker of a node (its VMs are gone)."""
        self._stop(lambda key: key.startswith(f"{zone}/{node}/"))

    def stop_vm(self, key: str) -> None:
        """Stop the metadata server `serve_vm` started as `key`."""
        self._stop(lambda found: found == key)

    def _stop(self, which: Callable[[str], bool]) -> None:
        with self._lock:
            gone = [self._servers.pop(key) for key in list(self._servers) if which(key)]
        for server in gone:
            _close(server)

    def stop_all(self) -> None:
        with self._lock:
            gone = list(self._servers.values())
            self._servers.clear()
        for server in gone:
            _close(server)


def _close(server: ThreadingHTTPServer) -> None:
    server.shutdown()
    server.server_close()
