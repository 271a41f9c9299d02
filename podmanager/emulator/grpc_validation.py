"""The schema check at the emulator's gRPC door: one server interceptor in front of every
Google service the emulator serves over gRPC (Cloud TPU, its operations, Secret Manager).

A gRPC method is checked as its REST binding in Google's discovery document (the same method
behind both: https://cloud.google.com/apis/docs/http, "gRPC transcoding"): `GRPC_METHODS` maps
each to its discovery method id(s); a method with two bindings (Secret Manager's global and
regional secrets) is the one whose path parameters' patterns the request's names fit. The
request message is read as its JSON (proto3's JSON mapping, camelCase), split as the binding
splits it (path parameters, the body's field or the whole message for `body: "*"`, the rest as
query parameters) and checked by `validation.check_call`; a refused call fails with
INVALID_ARGUMENT and a `google.rpc.BadRequest`, before the handler sees it. In strict mode the
answer is checked against the response schema and replaced by INTERNAL if it breaks it.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import grpc
from google.protobuf import any_pb2, json_format
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from podmanager.emulator import discovery, validation
from podmanager.emulator.discovery import Method
from podmanager.emulator.schema_gate import Gate
from podmanager.emulator.validation import Refusal

_TPU = "/google.cloud.tpu.v2.Tpu/"
_SECRETS = "/google.cloud.secretmanager.v1.SecretManagerService/"
_NODES = "tpu.projects.locations.nodes."
_QUEUED = "tpu.projects.locations.queuedResources."
_SECRET = ("secretmanager.projects.secrets.", "secretmanager.projects.locations.secrets.")
_VERSION = ("secretmanager.projects.secrets.versions.", "secretmanager.projects.locations.secrets.versions.")

# gRPC method -> its discovery method id(s), in the order tried.
GRPC_METHODS: dict[str, tuple[str, ...]] = {
    **{_TPU + grpc_name: (_NODES + verb,) for grpc_name, verb in (
        ("CreateNode", "create"), ("GetNode", "get"), ("ListNodes", "list"), ("DeleteNode", "delete"),
        ("UpdateNode", "patch"), ("StartNode", "start"), ("StopNode", "stop"),
        ("GetGuestAttributes", "getGuestAttributes"))},
    **{_TPU + grpc_name: (_QUEUED + verb,) for grpc_name, verb in (
        ("CreateQueuedResource", "create"), ("GetQueuedResource", "get"), ("ListQueuedResources", "list"),
        ("DeleteQueuedResource", "delete"), ("ResetQueuedResource", "reset"))},
    _TPU + "GenerateServiceIdentity": ("tpu.projects.locations.generateServiceIdentity",),
    _TPU + "ListAcceleratorTypes": ("tpu.projects.locations.acceleratorTypes.list",),
    _TPU + "GetAcceleratorType": ("tpu.projects.locations.acceleratorTypes.get",),
    _TPU + "ListRuntimeVersions": ("tpu.projects.locations.runtimeVersions.list",),
    _TPU + "GetRuntimeVersion": ("tpu.projects.locations.runtimeVersions.get",),
    # The Operations service of whichever API the port serves: here the Cloud TPU API's.
    **{f"/google.longrunning.Operations/{grpc_name}": (f"tpu.projects.locations.operations.{verb}",)
       for grpc_name, verb in (("GetOperation", "get"), ("ListOperations", "list"),
                               ("DeleteOperation", "delete"), ("CancelOperation", "cancel"))},
    **{_SECRETS + grpc_name: tuple(prefix + verb for prefix in _SECRET) for grpc_name, verb in (
        ("CreateSecret", "create"), ("GetSecret", "get"), ("ListSecrets", "list"), ("UpdateSecret", "patch"),
        ("DeleteSecret", "delete"), ("AddSecretVersion", "addVersion"), ("GetIamPolicy", "getIamPolicy"),
        ("SetIamPolicy", "setIamPolicy"), ("TestIamPermissions", "testIamPermissions"))},
    **{_SECRETS + grpc_name: tuple(prefix + verb for prefix in _VERSION) for grpc_name, verb in (
        ("AccessSecretVersion", "access"), ("GetSecretVersion", "get"), ("ListSecretVersions", "list"),
        ("EnableSecretVersion", "enable"), ("DisableSecretVersion", "disable"),
        ("DestroySecretVersion", "destroy"))},
}


def _raw(message: Any) -> Any:
    """The protobuf message under a proto-plus one (a protobuf message as it is)."""
    return type(message).pb(message) if hasattr(type(message), "pb") else message


def message_json(message: Any) -> dict[str, Any]:
    """A request or answer (proto-plus or protobuf) as proto3 JSON, camelCase, defaults left out."""
    return json_format.MessageToDict(_raw(message))


def check_message(grpc_method: str, request: Any) -> tuple[Method, Refusal | None]:
    """The discovery method a gRPC request is, and why Google refuses it (None: it is not)."""
    return check_json(grpc_method, message_json(request), type(request).__name__)


def check_json(grpc_method: str, value: dict[str, Any], request_type: str) -> tuple[Method, Refusal | None]:
    """`check_message` of the request's JSON; of two bindings, the first that takes it (else
    the first's refusal)."""
    verdicts = []
    for method_id in GRPC_METHODS[grpc_method]:
        method = discovery.method(method_id)
        refused = _check_split(method, value, request_type)
        if refused is None:
            return method, None
        verdicts.append((method, refused))
    return verdicts[0]


def _check_split(method: Method, value: dict[str, Any], request_type: str) -> Refusal | None:
    """The message split as its REST binding splits it, then checked."""
    rest = dict(value)
    top = validation.body_field(method)
    body_key = top and (method.request or "")[:1].lower() + (method.request or "")[1:]
    path: dict[str, str] = {}
    for name, spec in method.parameters.items():
        if spec.get("location") != "path":
            continue
        if name in rest:
            path[name] = str(rest.pop(name))
        else:  # bound inside the body (UpdateNode's node.name), or missing: "" fails the pattern
            inside = rest.get(body_key) if body_key else None
            path[name] = str(inside.get(name, "")) if isinstance(inside, dict) else ""
    body: Any = None
    if method.request is not None:
        body = rest.pop(body_key, {}) if body_key else rest
        rest = {} if not body_key else rest
    query: dict[str, list[str]] = {}
    for name, item in rest.items():
        _flatten(name, item, query)
    for name in query:
        if name not in method.parameters:
            return validation.Refusal(
                400, "INVALID_ARGUMENT", f'Unknown name "{name}" in {request_type}: {method.id} of {method.api.name} '
                f"revision {method.api.revision} has no such field.", name)
    return validation.check_call(method, path, query, body)


def _flatten(name: str, value: Any, into: dict[str, list[str]]) -> None:
    """A request field as the query parameters its REST binding carries it in (nested: a.b)."""
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(f"{name}.{key}", item, into)
    elif isinstance(value, list):
        into[name] = [_as_text(item) for item in value]
    else:
        into[name] = [_as_text(value)]


def _as_text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _status(refusal: Refusal, code: int) -> grpc.Status:
    status = status_pb2.Status(code=code, message=refusal.message)
    if refusal.code == "INVALID_ARGUMENT":
        detail = any_pb2.Any()
        detail.Pack(error_details_pb2.BadRequest(field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field=refusal.field, description=refusal.message)]))
        status.details.append(detail)
    return rpc_status.to_status(status)


class SchemaInterceptor(grpc.ServerInterceptor):
    """Checks each call of a method in `GRPC_METHODS` (others, the emulator's own control
    service, pass untouched) through `gate`."""

    def __init__(self, gate: Gate | None = None):
        self.gate = gate or Gate.from_environment()

    def intercept_service(self, continuation: Callable[[Any], Any], details: grpc.HandlerCallDetails) -> Any:
        handler = continuation(details)
        name = details.method
        if handler is None or handler.unary_unary is None or name not in GRPC_METHODS:
            return handler
        inner = handler.unary_unary
        gate = self.gate

        def checked(request: Any, context: grpc.ServicerContext) -> Any:
            started = time.thread_time()
            method, refused = check_message(name, request)
            spent = time.thread_time() - started
            if refused is not None:
                gate.log_check("grpc", method, name, refused, spent_s=spent)
                context.abort_with_status(_status(refused, code_pb2.INVALID_ARGUMENT))
            answer = inner(request, context)
            if not gate.strict:
                gate.log_check("grpc", method, name, None, spent_s=spent)
                return answer
            started = time.thread_time()
            problem = gate.answer_problem(method, _raw(answer).SerializeToString(deterministic=True),
                                          lambda: validation.message_problem(method, message_json(answer)))
            gate.log_check("grpc", method, name, None, problem, spent + time.thread_time() - started)
            if problem is not None:
                failed = Refusal(500, "INTERNAL", gate.answer_failed(method, name, problem))
                context.abort_with_status(_status(failed, code_pb2.INTERNAL))
            return answer

        return grpc.unary_unary_rpc_method_handler(checked, request_deserializer=handler.request_deserializer,
                                                   response_serializer=handler.response_serializer)
