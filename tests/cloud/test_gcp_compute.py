"""Compute Engine through its REST API as plain JSON (issue 43): neither podmanager's client nor
the emulator answering it loads `google.cloud.compute_v1` (seconds of imports every `up` and
`down` paid), and the client keeps what the library gave: lists read page by page, errors in
the taxonomy (a missing API or permission named, transient ones retried), an operation's error
raised, its wait ended at the caller's timeout. Against the emulator, and against a canned
server for what the emulator never answers (a second page, a 503, an operation's error)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from podmanager.cloud import errors
from podmanager.cloud.gcp.compute import ComputeNetworks
from podmanager.cloud.gcp.instances import ComputeInstances
from podmanager.cloud.gcp.permissions import ServiceDisabledError
from podmanager.cloud.network import Allowed, FirewallRule
from podmanager.core.errors import TimeoutExceededError

PROJECT = "p-json"
FAST = {"retry_deadline_s": 5, "retry_initial_s": 0.01, "retry_max_s": 0.05, "poll_interval_s": 0.01}

# The preflight's calls, the controller VM's zone choice and lookup, and a rule made and deleted,
# each answered by an emulator in the same process: then the modules loaded.
_NO_COMPUTE_V1 = """
import sys
from podmanager.cloud.gcp.compute import ComputeNetworks
from podmanager.cloud.gcp.instances import ComputeInstances
from podmanager.cloud.gcp.controller_vm import find_controller_vm, nearest_zones
from podmanager.cluster.preflight import check_network, delete_cluster_rule
from podmanager.core.spec import parse_spec
from podmanager.emulator.server import Emulator

emulator = Emulator("p-json", persist=False)
emulator.serve_rest()
root = f"http://127.0.0.1:{emulator.rest_port}"
spec = parse_spec({"name": "c", "slices": [{"accelerator": "v4-8"}], "zones": ["us-central2-b"]}, dry_run=True)
with ComputeNetworks("p-json", endpoint=root) as networks, ComputeInstances("p-json", endpoint=root) as instances:
    check_network(spec, networks, record=lambda *a, **k: None)
    assert networks.firewall("pm-c-internal") is not None
    assert networks.default_service_account()
    delete_cluster_rule(spec, networks, lambda *a, **k: None)
    by_region = instances.zones_by_region()
    assert [z for z in nearest_zones(["us-central2-b"], by_region, in_region_only=False)
            if instances.offers(z, "e2-standard-4")]
    assert find_controller_vm(spec, instances) is None
emulator.stop()
print(sorted(name for name in sys.modules if name.startswith("google.cloud.compute")))
"""


def test_the_preflight_and_the_emulator_answering_it_load_no_compute_v1():
    done = subprocess.run([sys.executable, "-c", _NO_COMPUTE_V1], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


# ---------------------------------------------------------------------- a canned Compute Engine


class Canned:
    """Answers (status, JSON) per "VERB /path" in turn (the last one again once the rest are used);
    records every request's path with its query and its body."""

    def __init__(self, answers: dict[str, list[tuple[int, dict[str, Any]]]]):
        self.answers = answers
        self.seen: list[tuple[str, dict[str, Any] | None]] = []

    def answer(self, verb: str, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        self.seen.append((f"{verb} {path}", json.loads(body) if body else None))
        queue = self.answers.get(f"{verb} {path.split('?')[0]}") or [(404, {"error": {"code": 404, "message": "no"}})]
        return queue.pop(0) if len(queue) > 1 else queue[0]


@pytest.fixture
def canned() -> Iterator[tuple[Canned, str]]:
    served = Canned({})

    class Handler(BaseHTTPRequestHandler):
        def _any(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            status, answer = served.answer(self.command, self.path, body)
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = _any  # http.server calls do_<VERB>

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield served, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


BASE = f"/compute/v1/projects/{PROJECT}"


def test_a_list_is_read_page_by_page(canned):
    served, root = canned
    served.answers[f"GET {BASE}/global/firewalls"] = [
        (200, {"items": [{"name": "a", "network": "x/global/networks/default"}], "nextPageToken": "second"}),
        (200, {"items": [{"name": "b", "network": "x/global/networks/default", "priority": 900}]})]
    served.answers[f"GET {BASE}/aggregated/instances"] = [
        (200, {"items": {"zones/z-a": {"instances": [{"name": "vm-1", "zone": "x/zones/z-a"}]},
                         "zones/z-b": {"warning": {"code": "NO_RESULTS_ON_PAGE"}}}, "nextPageToken": "t"}),
        (200, {"items": {"zones/z-c": {"instances": [{"name": "vm-2", "zone": "x/zones/z-c"}]}}})]
    with ComputeNetworks(PROJECT, endpoint=root, **FAST) as networks, \
            ComputeInstances(PROJECT, endpoint=root, **FAST) as instances:
        assert [(r.name, r.priority) for r in networks.firewalls()] == [("a", 1000), ("b", 900)]
        assert [(vm.name, vm.zone) for vm in instances.labelled({"k": "v"})] == [("vm-1", "z-a"), ("vm-2", "z-c")]
    asked = [path for path, _ in served.seen]
    assert asked[:2] == [f"GET {BASE}/global/firewalls", f"GET {BASE}/global/firewalls?pageToken=second"]
    assert asked[2].startswith(f"GET {BASE}/aggregated/instances?filter=") and "pageToken=t" in asked[3]


def test_errors_keep_the_taxonomy_and_transient_ones_are_retried(canned):
    served, root = canned
    url = "https://console.developers.google.com/apis/api/compute.googleapis.com/overview?project=123"
    served.answers[f"GET {BASE}/global/networks/off"] = [(403, {"error": {
        "code": 403, "message": "Compute Engine API has not been used in project 123 before or it is disabled.",
        "status": "PERMISSION_DENIED", "details": [{
            "@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "SERVICE_DISABLED",
            "metadata": {"service": "compute.googleapis.com", "consumer": "projects/123", "activationUrl": url}}]}})]
    served.answers[f"GET {BASE}/global/networks/flaky"] = [
        (503, {"error": {"code": 503, "message": "backend"}}), (429, {"error": {"code": 429, "message": "slow down"}}),
        (200, {"name": "flaky", "autoCreateSubnetworks": True})]
    served.answers[f"GET {BASE}/global/networks/gone"] = [(404, {"error": {"code": 404, "message": "not found"}})]
    served.answers[f"POST {BASE}/global/firewalls"] = [(409, {"error": {"code": 409, "message": "exists"}})]
    with ComputeNetworks(PROJECT, endpoint=root, **FAST) as networks:
        with pytest.raises(ServiceDisabledError) as disabled:
            networks.network("off")
        assert disabled.value.exit_code == 2 and "gcloud services enable compute.googleapis.com" in disabled.value.hint
        assert networks.network("flaky").auto_create_subnetworks  # after a 503 and a 429
        with pytest.raises(errors.NotFoundError, match=r"not found \(HTTP 404\)"):
            networks.network("gone")
        with pytest.raises(errors.AlreadyExistsError):
            networks.create_firewall(FirewallRule(name="r", network="default", allowed=[Allowed(protocol="tcp")]))
    [(_, body)] = [(path, body) for path, body in served.seen if path.startswith("POST")]
    assert body == {"name": "r", "network": f"projects/{PROJECT}/global/networks/default", "direction": "INGRESS",
                    "priority": 1000, "disabled": False, "allowed": [{"IPProtocol": "tcp"}]}


def test_an_unreachable_endpoint_is_transient_until_the_retry_deadline():
    with ComputeNetworks(PROJECT, endpoint="http://127.0.0.1:9", retry_deadline_s=0.2, retry_initial_s=0.01,
                         retry_max_s=0.02) as networks:
        with pytest.raises(errors.TransientError, match="cannot reach the Compute Engine API"):
            networks.firewalls()


def test_an_operations_error_is_raised_and_its_wait_ends_at_the_callers_timeout(canned):
    served, root = canned
    running = {"name": "op-1", "status": "RUNNING"}
    served.answers[f"POST {BASE}/global/firewalls"] = [(200, running)]
    served.answers[f"POST {BASE}/global/operations/op-1/wait"] = [(200, {
        "name": "op-1", "status": "DONE",
        "error": {"errors": [{"code": "RESOURCE_ALREADY_EXISTS", "message": "The resource already exists"}]}})]
    served.answers[f"DELETE {BASE}/global/firewalls/slow"] = [(200, {"name": "op-2", "status": "RUNNING"})]
    served.answers[f"POST {BASE}/global/operations/op-2/wait"] = [(200, {"name": "op-2", "status": "RUNNING"})]
    with ComputeNetworks(PROJECT, endpoint=root, **FAST) as networks:
        with pytest.raises(errors.AlreadyExistsError, match="RESOURCE_ALREADY_EXISTS"):
            networks.create_firewall(FirewallRule(name="r", network="default", allowed=[Allowed(protocol="tcp")]))
        with pytest.raises(TimeoutExceededError, match="still runs after 0.3s"):
            networks.delete_firewall("slow", timeout_s=0.3)
