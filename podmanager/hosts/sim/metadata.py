"""The GCE metadata server of one simulated TPU VM, as a TPU program and Ray see it.

A real TPU VM answers `http://metadata.google.internal/computeMetadata/v1/...` (only with
the header `Metadata-Flavor: Google`; 403 without): which worker it is, the slice's workers,
its accelerator type, `tpu-env`, and whether it is about to be preempted or maintained.
Each simulated host runs one of these on loopback (its processes find it through
`GCE_METADATA_IP`), started with the host and killed with it. Preemption and maintenance
are read from the simulated cloud's state file on every request, without changing it, so
the values change when the simulator preempts (with notice) or repairs the slice.

    python -m podmanager.hosts.sim.metadata --state F --zone Z --node N --worker W --port P ...
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from podmanager.cloud.base import NodeState
from podmanager.cloud.sim.records import NodeRecord, SimState
from podmanager.hosts.runs import MEGASCALE_FILE_ENV
from podmanager.hosts.sim import lease

PREFIX = "/computeMetadata/v1/"
LONG_POLL_S = 60.0


class SimulatedVm:
    """The facts one simulated VM's metadata serves."""

    def __init__(self, *, state_file: Path, zone: str, node: str, worker: int, accelerator: str,
                 endpoints: list[str], megascale_file: Path | None):
        self.state_file = state_file
        self.zone, self.node, self.worker = zone, node, worker
        self.accelerator = accelerator
        self.endpoints = endpoints
        self.megascale_file = megascale_file

    def _record(self) -> NodeRecord | None:
        try:
            return SimState.model_validate_json(self.state_file.read_text()).nodes.get(f"{self.zone}/{self.node}")
        except (OSError, ValueError):  # mid-replace, or gone with the project
            return None

    def preempted(self) -> str:
        record = self._record()
        return "TRUE" if record and (record.preempt_notice or record.state == NodeState.PREEMPTED) else "FALSE"

    def maintenance_event(self) -> str:
        record = self._record()
        return "TERMINATE_ON_HOST_MAINTENANCE" if record and record.state == NodeState.REPAIRING else "NONE"

    def tpu_env(self) -> str:
        values = {"ACCELERATOR_TYPE": self.accelerator, "NODE_ID": self.node, "WORKER_ID": str(self.worker),
                  "ZONE": self.zone}
        if self.megascale_file is not None and self.megascale_file.exists():
            values.update(json.loads(self.megascale_file.read_text()))
        return "".join(f"{key}: '{value}'\n" for key, value in values.items())

    def value(self, path: str) -> str | None:
        """The value at `path` (below computeMetadata/v1/), or None for a 404."""
        fixed = {
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
        answer = fixed.get(path.strip("/"))
        return answer() if answer else None


def handler_for(vm: SimulatedVm) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            url = urlparse(self.path)
            if self.headers.get("Metadata-Flavor") != "Google":
                return self._send(403, "Missing required header: Metadata-Flavor: Google\n")
            if not url.path.startswith(PREFIX):
                return self._send(404, "not found\n")
            path = url.path[len(PREFIX):]
            value = vm.value(path)
            if value is None:
                return self._send(404, "not found\n")
            query = parse_qs(url.query)
            if query.get("wait_for_change", ["false"])[0].lower() == "true":
                value = self._wait_for_change(path, value, query)
            self._send(200, value)

        def _wait_for_change(self, path: str, first: str, query: dict[str, list[str]]) -> str:
            """The long poll: answer when the value differs from `last_etag`'s (or the first
            seen), or after `timeout_sec`."""
            deadline = time.monotonic() + float(query.get("timeout_sec", [LONG_POLL_S])[0])
            seen = query.get("last_etag", [_etag(first)])[0]
            while time.monotonic() < deadline:
                value = vm.value(path) or ""
                if _etag(value) != seen:
                    return value
                time.sleep(0.1)
            return vm.value(path) or ""

        def _send(self, code: int, body: str) -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Metadata-Flavor", "Google")
            self.send_header("Content-Type", "application/text")
            self.send_header("ETag", _etag(body))
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's signature
            pass  # a TPU program polls this; its log would fill the host's

    return Handler


def _etag(value: str) -> str:
    return hashlib.sha1(value.encode()).hexdigest()[:16]


def serve(vm: SimulatedVm, port: int, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((host, port), handler_for(vm))
    server.daemon_threads = True
    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state", required=True, help="the simulated cloud's state file")
    parser.add_argument("--zone", required=True)
    parser.add_argument("--node", required=True)
    parser.add_argument("--worker", type=int, required=True)
    parser.add_argument("--accelerator", required=True)
    parser.add_argument("--endpoints", required=True, help="comma list: every worker's address, worker 0 first")
    parser.add_argument("--port", type=int, required=True)
    lease.add_arguments(parser)
    opts = parser.parse_args(argv)
    if opts.lease is not None:  # the VM's own long-lived process: it holds the VM's lease too
        lease.hold_in_background(opts.lease, opts.temp_dir)
    megascale = os.environ.get(MEGASCALE_FILE_ENV)
    vm = SimulatedVm(state_file=Path(opts.state), zone=opts.zone, node=opts.node, worker=opts.worker,
                     accelerator=opts.accelerator, endpoints=opts.endpoints.split(","),
                     megascale_file=Path(megascale) if megascale else None)
    serve(vm, opts.port).serve_forever()


if __name__ == "__main__":
    main()
