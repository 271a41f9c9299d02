"""`up` on Google Cloud with a local controller (`controller.local: true`) is refused, exit 2
naming the field and the fix, unless this machine is a Compute Engine VM in the cluster's
network, as its metadata server says (a fake one here, reached through GCE_METADATA_HOST as
Google's libraries reach theirs). A dry run and `podmanager emulator`'s cloud are not asked."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator

import pytest

from podmanager.cluster import backends
from podmanager.cluster.controller_place import check_local_controller
from podmanager.core.errors import SpecError
from podmanager.core.spec import parse_spec


def spec(*, local: bool = True, network: str | None = None, dry_run: bool = False):
    body = {"name": "c", "project": "my-project", "zones": ["us-central2-b"], "slices": [{"accelerator": "v4-8"}],
            "controller": {"local": local}}
    if network:
        body["network"] = {"network": network}
    return parse_spec(body, dry_run=dry_run)


@pytest.fixture
def metadata_server(monkeypatch) -> Iterator[list]:
    """A metadata server answering the interfaces list with the networks put in the yielded list."""
    networks: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            assert self.headers.get("Metadata-Flavor") == "Google"
            assert self.path == "/computeMetadata/v1/instance/network-interfaces/?recursive=true"
            body = json.dumps([{"network": f"projects/123/networks/{n}", "ip": "10.0.0.2"} for n in networks]).encode()
            self.send_response(200)
            self.send_header("Metadata-Flavor", "Google")
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("GCE_METADATA_HOST", f"127.0.0.1:{server.server_address[1]}")
    monkeypatch.delenv("TPU_EMULATOR_HOST", raising=False)
    try:
        yield networks
    finally:
        server.shutdown()
        server.server_close()


def nobody_listening() -> str:
    """A loopback address nothing listens on: a laptop's "metadata server"."""
    closed = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    closed.server_close()
    return f"127.0.0.1:{closed.server_address[1]}"


def test_a_laptop_without_a_metadata_server_is_refused_naming_the_field_and_the_fix(monkeypatch):
    address = nobody_listening()
    monkeypatch.setenv("GCE_METADATA_HOST", address)
    monkeypatch.delenv("TPU_EMULATOR_HOST", raising=False)
    with pytest.raises(SpecError) as refused:
        check_local_controller(spec())
    assert refused.value.exit_code == 2
    assert str(refused.value).startswith(f"controller.local: true: this machine is not a Compute Engine VM "
                                         f"(no metadata server answered at {address})")
    assert "Set `controller: {local: false}` in the spec: `up` then makes a controller VM" in str(refused.value)


def test_a_vm_in_the_clusters_network_may_be_its_controller(metadata_server):
    metadata_server.extend(["other", "tpu-vpc"])
    check_local_controller(spec(network="projects/p/global/networks/tpu-vpc"))
    metadata_server[:] = ["default"]
    check_local_controller(spec())  # no network named: the project's default


def test_a_vm_in_another_network_is_refused_naming_both(metadata_server):
    metadata_server.append("default")
    with pytest.raises(SpecError, match="this VM's network is default, not the cluster's tpu-vpc") as refused:
        check_local_controller(spec(network="tpu-vpc"))
    assert "Run podmanager on a VM in network tpu-vpc, or set `controller: {local: false}`" in str(refused.value)


def test_a_controller_vm_a_loopback_dry_run_and_an_emulated_cloud_are_not_asked(monkeypatch):
    monkeypatch.setenv("GCE_METADATA_HOST", nobody_listening())  # asked, it would refuse
    monkeypatch.setattr(backends, "vms_in_namespaces", lambda spec: False)
    check_local_controller(spec(local=False))
    check_local_controller(spec(dry_run=True))
    monkeypatch.setenv("TPU_EMULATOR_HOST", "127.0.0.1:8470")
    check_local_controller(spec())


def test_a_dry_run_in_the_namespace_mode_is_asked_as_google_cloud_asks(monkeypatch, metadata_server):
    """There this machine stands outside the simulated VPC, as a laptop does; a simulated VM's
    metadata server names its network (tests/emulator/test_instance_metadata.py)."""
    monkeypatch.setattr(backends, "vms_in_namespaces", lambda spec: True)
    metadata_server.append("default")
    check_local_controller(spec(dry_run=True))  # a simulated VM of the cluster's network
    monkeypatch.setenv("GCE_METADATA_HOST", nobody_listening())
    with pytest.raises(SpecError) as refused:
        check_local_controller(spec(dry_run=True))
    assert refused.value.exit_code == 2
    assert str(refused.value).startswith("controller.local: true: this machine is not a simulated VM of the dry "
                                         "run's namespace mode")
