"""The emulator refuses what Google's API definitions refuse, as Google answers it: an unknown
method, a path parameter off its pattern, an unknown query parameter, an unknown body field, a
value of the wrong type or enum; over REST (through the real server and Google's own clients)
and over gRPC; and in strict mode an answer that breaks the response schema fails loudly."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.api_core import exceptions as google_exceptions
from google.api_core.client_options import ClientOptions
from google.cloud import compute_v1
from google.cloud.tpu_v2 import TpuClient
from google.cloud.tpu_v2.services.tpu.transports import TpuGrpcTransport
from google.cloud.tpu_v2.types import cloud_tpu
from google.longrunning import operations_pb2
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from podmanager.cloud.gcp import emulator_identity
from podmanager.core.clock import FakeClock
from podmanager.emulator import discovery, grpc_validation, rest, validation
from podmanager.emulator.schema_gate import STRICT_ENV, Gate
from podmanager.emulator.server import Emulator
from podmanager.emulator.sim.cloud import SimCloud
from podmanager.emulator.tpu_api import TpuEmulator

PROJECT = "p-schema"
ZONE_PATTERN = "[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    served = Emulator(PROJECT, persist=False)
    served.serve_rest()
    yield served
    served.stop()


def call(emulator: Emulator, method: str, path: str, body: object = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://127.0.0.1:{emulator.rest_port}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {emulator_identity.token()}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


def refused_with(answer: tuple[int, dict], message: str, field: str) -> None:
    """A 400 in Google's shape: INVALID_ARGUMENT, the message, a BadRequest naming the field."""
    status, body = answer
    assert status == 400, body
    assert body["error"]["code"] == 400 and body["error"]["status"] == "INVALID_ARGUMENT"
    assert body["error"]["message"] == message
    assert body["error"]["details"] == [{"@type": "type.googleapis.com/google.rpc.BadRequest",
                                         "fieldViolations": [{"field": field, "description": message}]}]


NETWORKS = f"/compute/v1/projects/{PROJECT}/global/networks"
FIREWALLS = f"/compute/v1/projects/{PROJECT}/global/firewalls"
RULE = {"name": "pm-x", "network": "global/networks/default", "allowed": [{"IPProtocol": "tcp"}]}


def test_a_method_no_api_has_is_404_as_googles_front_end_answers(emulator):
    for method, path in (("GET", f"/compute/v1/projects/{PROJECT}/global/nowhere"),
                         ("PUT", f"{NETWORKS}/default"),  # networks are read, patched, deleted: never PUT
                         ("GET", "/v9/anything")):
        status, body = call(emulator, method, path)
        assert status == 404
        assert body["error"] == {"code": 404, "status": "NOT_FOUND",
                                 "message": f"The requested URL {path} was not found on this server."}


def test_a_path_parameter_off_its_pattern_is_refused_through_the_client_too(emulator):
    path = f"/compute/v1/projects/{PROJECT}/zones/Bad_Zone/instances"
    refused_with(call(emulator, "GET", path),
                 f"Invalid value for field 'zone': 'Bad_Zone'. Must be a match of regex '{ZONE_PATTERN}'", "zone")
    instances = compute_v1.InstancesClient(credentials=emulator_identity.credentials(), client_options=ClientOptions(
        api_endpoint=f"http://127.0.0.1:{emulator.rest_port}"))
    with pytest.raises(google_exceptions.BadRequest, match="Must be a match of regex"):
        list(instances.list(project=PROJECT, zone="Bad_Zone"))
    assert emulator.api.requests_of("compute.instances.list") == []  # refused before the handler


def test_an_unknown_query_parameter_is_refused_and_the_system_parameters_are_not(emulator):
    refused_with(call(emulator, "GET", f"{NETWORKS}?pageSize=5"),
                 'Invalid JSON payload received. Unknown name "pageSize": Cannot bind query parameter. '
                 "Field 'pageSize' could not be found in request message.", "pageSize")
    system = "alt=json&%24alt=json&prettyPrint=false&fields=items&%24.xgafv=2&quotaUser=me&key=k&maxResults=5"
    status, body = call(emulator, "GET", f"{NETWORKS}?{system}")
    assert status == 200 and [n["name"] for n in body["items"]] == ["default"]


def test_a_query_parameter_of_the_wrong_type_or_enum_is_refused(emulator):
    refused_with(call(emulator, "GET", f"{NETWORKS}?maxResults=many"),
                 "Invalid value at 'max_results' (TYPE_UINT32), \"many\"", "maxResults")
    refused_with(call(emulator, "GET", f"/compute/v1/projects/{PROJECT}/aggregated/instances?includeAllScopes=yes"),
                 "Invalid value at 'include_all_scopes' (TYPE_BOOL), \"yes\"", "includeAllScopes")
    refused_with(call(emulator, "GET", f"{NETWORKS}?%24.xgafv=3"), "Invalid value at '$.xgafv' (TYPE_ENUM), \"3\"",
                 "$.xgafv")


def test_an_unknown_body_field_is_refused_naming_where_and_nothing_is_made(emulator):
    refused_with(call(emulator, "POST", FIREWALLS, {**RULE, "sourceTag": ["x"]}),
                 'Invalid JSON payload received. Unknown name "sourceTag" at \'firewall\': Cannot find field.',
                 "firewall")
    nested = {**RULE, "allowed": [{"IPProtocol": "tcp", "port": ["22"]}]}
    refused_with(call(emulator, "POST", FIREWALLS, nested),
                 'Invalid JSON payload received. Unknown name "port" at \'firewall.allowed[0]\': Cannot find field.',
                 "firewall.allowed[0]")
    status, body = call(emulator, "GET", FIREWALLS)
    assert status == 200 and "pm-x" not in {rule["name"] for rule in body["items"]}
    assert emulator.api.requests_of("compute.firewalls.insert") == []


def test_a_body_value_of_the_wrong_type_or_enum_is_refused(emulator):
    refused_with(call(emulator, "POST", FIREWALLS, {**RULE, "priority": "high"}),
                 "Invalid value at 'firewall.priority' (TYPE_INT32), \"high\"", "firewall.priority")
    refused_with(call(emulator, "POST", FIREWALLS, {**RULE, "disabled": "no"}),
                 "Invalid value at 'firewall.disabled' (TYPE_BOOL), \"no\"", "firewall.disabled")
    refused_with(call(emulator, "POST", FIREWALLS, {**RULE, "direction": "SIDEWAYS"}),
                 "Invalid value at 'firewall.direction' (TYPE_ENUM), \"SIDEWAYS\"", "firewall.direction")
    refused_with(call(emulator, "POST", FIREWALLS, {**RULE, "name": ["pm-x"]}),
                 'Invalid JSON payload received. Unknown name "name" at \'firewall\': '
                 "Proto field is not repeating, cannot start list.", "firewall.name")
    # As proto3's JSON reads it: an int32 may come as a string, null is the default.
    status, _ = call(emulator, "POST", FIREWALLS, {**RULE, "priority": "900", "description": None})
    assert status == 200


# ---------------------------------------------------------------------- gRPC


@pytest.fixture
def tpu_rig() -> Iterator[tuple[TpuEmulator, TpuClient]]:
    emulator = TpuEmulator(SimCloud(PROJECT, clock=FakeClock()))
    server, port = emulator.serve()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield emulator, TpuClient(transport=TpuGrpcTransport(channel=channel))
    finally:
        channel.close()
        server.stop(grace=None).wait()


def bad_request(error: google_exceptions.GoogleAPICallError) -> error_details_pb2.BadRequest:
    status = rpc_status.from_call(error.response)
    [detail] = status.details
    found = error_details_pb2.BadRequest()
    assert detail.Unpack(found)
    return found


def test_a_grpc_request_off_the_methods_pattern_is_invalid_argument_before_the_handler(tpu_rig):
    emulator, client = tpu_rig
    with pytest.raises(google_exceptions.InvalidArgument) as refused:
        client.get_node(name=f"projects/{PROJECT}/nodes/n1")  # no locations/ZONE
    pattern = "^projects/[^/]+/locations/[^/]+/nodes/[^/]+$"
    message = f"Invalid value for field 'name': 'projects/{PROJECT}/nodes/n1'. Must be a match of regex '{pattern}'"
    assert refused.value.message == message
    assert [(v.field, v.description) for v in bad_request(refused.value).field_violations] == [("name", message)]
    assert emulator.requests_of("GetNode") == []


def test_a_grpc_request_is_checked_as_its_rest_binding_splits_it():
    create = "/google.cloud.tpu.v2.Tpu/CreateNode"
    node = {"acceleratorType": "v4-8", "runtimeVersion": "tpu-ubuntu2204-base"}
    parent = f"projects/{PROJECT}/locations/us-central2-b"
    assert grpc_validation.check_json(create, {"parent": parent, "nodeId": "n", "node": node}, "CreateNodeRequest")[1] \
        is None
    # A field the API's revision does not have (a client newer than the definitions).
    _, refused = grpc_validation.check_json(create, {"parent": parent, "nodeId": "n", "node": node, "fresh": 1},
                                            "CreateNodeRequest")
    assert refused is not None and refused.message.startswith('Unknown name "fresh" in CreateNodeRequest')
    _, refused = grpc_validation.check_json(create, {"parent": parent, "node": {**node, "spot": True}},
                                            "CreateNodeRequest")
    assert refused is not None and refused.message == \
        'Invalid JSON payload received. Unknown name "spot" at \'node\': Cannot find field.'
    # UpdateNode names its node inside the body (node.name), as its binding does.
    update = "/google.cloud.tpu.v2.Tpu/UpdateNode"
    method, refused = grpc_validation.check_json(
        update, {"node": {"name": f"{parent}/nodes/n", "metadata": {"a": "b"}}, "updateMask": "metadata"},
        "UpdateNodeRequest")
    assert (method.id, refused) == ("tpu.projects.locations.nodes.patch", None)
    # Secret Manager's global and regional secrets: the binding the name fits.
    method, refused = grpc_validation.check_json(
        "/google.cloud.secretmanager.v1.SecretManagerService/GetSecret",
        {"name": f"projects/{PROJECT}/locations/us-central1/secrets/s"}, "GetSecretRequest")
    assert (method.id, refused) == ("secretmanager.projects.locations.secrets.get", None)


def test_every_google_method_the_emulator_serves_over_grpc_has_its_definition():
    served = set()
    emulator = TpuEmulator(SimCloud(PROJECT, clock=FakeClock()))
    for handler in emulator.handlers():
        service = handler.service_name()
        if service.startswith("google."):
            served |= set(handler._method_handlers)  # noqa: SLF001 - grpc's table, by full method name
    assert served and served <= set(grpc_validation.GRPC_METHODS)
    for ids in grpc_validation.GRPC_METHODS.values():
        for method_id in ids:
            assert discovery.method(method_id).id == method_id


# ---------------------------------------------------------------------- strict: the answers


def broken_route(path: str, headers) -> rest.Answer | None:
    """compute.networks.get answered with a field Network does not have, and an int64 as a number."""
    if path.endswith("/networks/default"):
        return rest.json_answer(200, {"name": "default", "id": 5})
    return rest.json_answer(200, {"name": "default", "autoCreateSubnetworks": True, "subnet": "x"})


def get_json(port: int, path: str) -> tuple[int, dict]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as failed:
        return failed.code, json.loads(failed.read())


@pytest.mark.parametrize("strict", [True, False])
def test_in_strict_mode_an_answer_that_breaks_the_schema_fails_loudly(strict):
    server, port = rest.serve([broken_route], gate=Gate(strict=strict))
    try:
        int64 = get_json(port, f"{NETWORKS}/default")
        unknown = get_json(port, f"{NETWORKS}/other")
    finally:
        server.shutdown()
        server.server_close()
    if not strict:
        assert int64[0] == unknown[0] == 200
        return
    assert int64[0] == 500 and int64[1]["error"]["status"] == "INTERNAL"
    assert "compute.networks.get" in int64[1]["error"]["message"] and "int64 as a string" in int64[1]["error"]["message"]
    assert unknown[0] == 500 and 'Unknown name "subnet"' in unknown[1]["error"]["message"]


def test_in_strict_mode_a_grpc_answer_that_breaks_the_schema_is_internal(monkeypatch):
    monkeypatch.setenv(STRICT_ENV, "1")
    odd = cloud_tpu.Node(name=f"projects/{PROJECT}/locations/us-central2-b/nodes/n")
    cloud_tpu.Node.pb(odd).state = 99  # no state the API has
    emulator = TpuEmulator(SimCloud(PROJECT, clock=FakeClock()))
    emulator.get_node = lambda request: odd  # the handler's answer, as served
    server, port = emulator.serve()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        with pytest.raises(google_exceptions.InternalServerError, match="Node: Invalid value at 'state'"):
            TpuClient(transport=TpuGrpcTransport(channel=channel)).get_node(name=odd.name)
    finally:
        channel.close()
        server.stop(grace=None).wait()


def test_the_record_has_a_line_a_request_with_what_was_refused(tmp_path):
    record = tmp_path / "schema.jsonl"
    server, port = rest.serve([broken_route], gate=Gate(strict=True, record_to=record))
    try:
        get_json(port, f"{NETWORKS}?pageSize=1")
        get_json(port, f"{NETWORKS}/default")
    finally:
        server.shutdown()
        server.server_close()
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert [(line["method"], bool(line["refused"]), bool(line["answer"])) for line in lines] == [
        ("compute.networks.list", True, False), ("compute.networks.get", False, True)]


def test_the_documents_come_from_the_pinned_package_and_the_docs_name_their_revisions():
    pinned = [line for line in (REPO / "pyproject.toml").read_text().splitlines() if "google-api-python-client" in line]
    assert len(pinned) == 1 and '"google-api-python-client==' in pinned[0]
    text = (REPO / "docs" / "dry-run.md").read_text()
    for name, revision in discovery.revisions().items():
        assert f"`{name}` {revision}" in text, f"docs/dry-run.md does not name {name} revision {revision}"


def test_an_operation_whose_metadata_is_an_any_keeps_to_the_schema():
    operation = operations_pb2.Operation(name=f"projects/{PROJECT}/locations/us-central2-b/operations/op-1")
    operation.metadata.Pack(cloud_tpu.OperationMetadata.pb(cloud_tpu.OperationMetadata(target="t", verb="create")))
    method = discovery.method("tpu.projects.locations.operations.get")
    assert validation.message_problem(method, grpc_validation.message_json(operation)) is None
