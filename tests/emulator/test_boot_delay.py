"""`simulation.boot_delay_s`: a simulated VM boots its image for that long before its guest
agent fetches and runs the startup script, as a real TPU VM takes minutes to boot."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from podmanager.cloud.base import CLUSTER_LABEL, SLICE_LABEL, Node, NodeState
from podmanager.controller.startup import STARTUP_SCRIPT_KEY
from podmanager.core.errors import SpecError
from podmanager.core.spec import parse_spec
from podmanager.emulator import vms
from podmanager.emulator.sim.cloud import SimCloud
from podmanager.vm import procs


def test_boot_delay_defaults_to_zero_and_refuses_a_negative_value_by_its_field() -> None:
    base = {"name": "bd", "backend": "simulated", "slices": [{"accelerator": "v4-8"}]}
    assert parse_spec(base).simulation.boot_delay_s == 0.0
    assert parse_spec({**base, "simulation": {"boot_delay_s": 90}}).simulation.boot_delay_s == 90.0
    with pytest.raises(SpecError, match=r"simulation\.boot_delay_s"):
        parse_spec({**base, "simulation": {"boot_delay_s": -1}})


def test_the_simulator_keeps_each_clusters_boot_delay(clock) -> None:
    cloud = SimCloud(clock=clock)
    cloud.configure_cluster("slow", 60.0, 0.1, "controller", boot_delay_s=45.0)
    assert cloud.boot_delay("slow") == 45.0
    assert cloud.boot_delay("other") == 0.0  # a cluster no `up` configured boots at once


class _MetadataServer:
    """A metadata server that serves a startup script and notes when it was fetched."""

    def __init__(self) -> None:
        self.fetched_at: list[float] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                outer.fetched_at.append(time.monotonic())
                body = b"exit 0\n"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def start(self, **_: object) -> int:  # the MetadataHost the booter asks for a VM's server
        return self.port

    def stop(self, zone: str, node: str) -> None:
        pass


@pytest.mark.processes  # boots a simulated VM
@pytest.mark.parametrize("delay_s", [0.0, 1.5])
def test_a_simulated_vm_runs_its_startup_script_only_after_its_boot_delay(monkeypatch, delay_s: float) -> None:
    metadata = _MetadataServer()
    booted: list = []
    real_launch = procs.launch

    def launch(command: list[str], env: dict[str, str], log_path: Path, machine_id: str | None = None, **kw):
        if command[0] != "bash":  # the lease holder: not needed to see the boot
            return None, machine_id
        proc, machine = real_launch(command, env, log_path, machine_id, **kw)
        booted.append(proc)
        return proc, machine

    monkeypatch.setattr(vms.procs, "launch", launch)
    booter = vms.SimHostBooter(metadata=metadata, boot_delay_of=lambda cluster: delay_s)
    node = Node(name="bd-s0", zone="sim-zone-a", accelerator_type="v4-8", state=NodeState.READY,
                labels={CLUSTER_LABEL: "bd", SLICE_LABEL: "0"}, metadata={STARTUP_SCRIPT_KEY: "#!/bin/bash"})
    try:
        started = time.monotonic()
        booter.boot(node)
        assert booted, "the VM's boot was not started"
        assert booted[0].wait(timeout=30) == 0, "the guest boot failed"
        assert len(metadata.fetched_at) == 1, "the startup script was not fetched"
        waited = metadata.fetched_at[0] - started
        assert waited >= delay_s
        assert waited < delay_s + 5.0
    finally:
        for proc in booted:
            if proc.poll() is None:
                proc.kill()
        metadata.server.shutdown()
        vms.kill_cluster_hosts("bd")
