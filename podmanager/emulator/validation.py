"""A request, and an answer, checked against Google's API definitions (`discovery.py`): what
Google's front end refuses before a request reaches the service, refused here too, in its words.

A call is its method's path parameters, query parameters and body, however it arrived (REST:
`rest_call`; gRPC: `grpc_validation.py` splits the request message the same way). It is refused
(`Refusal`, 400 INVALID_ARGUMENT with a `google.rpc.BadRequest`) for:
- a path or query parameter whose value breaks its type, `pattern` or `enum`;
- a query parameter the method does not declare and that is no system parameter
  (https://cloud.google.com/apis/docs/system-parameters);
- a body field the schema does not have, or whose value has the wrong JSON type or enum value
  (JSON read as proto3's JSON mapping reads it, https://protobuf.dev/programming-guides/json/:
  an int64 as a number or a string, an enum by name or number, null as the default).
The messages are Google's front end's as users report them [R]: `Invalid JSON payload received.
Unknown name "x" at 'node': Cannot find field.`, `... Unknown name "x": Cannot bind query
parameter. Field 'x' could not be found in request message.`, `Invalid value at 'node.labels'
(TYPE_STRING), 5`; Google's pages give no list of them.

An answer (`answer_problem`, the tests' strict mode) is checked against the method's response
schema as Google writes JSON: no unknown field, an int64 as a string, an enum by name, no null.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from podmanager.emulator import discovery, schema_values
from podmanager.emulator.discovery import Method
from podmanager.emulator.schema_values import (
    INT_RANGES,
    PROTO_TYPE,
    is_integer,
    is_number,
    snake,
)

BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"


@dataclass(frozen=True)
class Refusal:
    """Why Google's front end refuses a call: the HTTP status, google.rpc code and message, and
    the field a `google.rpc.BadRequest` names ("" for none)."""

    status: int
    code: str
    message: str
    field: str = ""

    def error_body(self) -> dict[str, Any]:
        """Google's JSON error body (https://cloud.google.com/apis/design/errors#http_mapping)."""
        error: dict[str, Any] = {"code": self.status, "message": self.message, "status": self.code}
        if self.code == "INVALID_ARGUMENT":
            violation = {"field": self.field, "description": self.message} if self.field else {"description": self.message}
            error["details"] = [{"@type": BAD_REQUEST, "fieldViolations": [violation]}]
        return {"error": error}


def _invalid(message: str, field: str = "") -> Refusal:
    return Refusal(400, "INVALID_ARGUMENT", message, field)


def not_found(path: str) -> Refusal:
    """No method of any served API has this verb and path: Google's front end knows no such URL
    (its words [R]; the documents do not say)."""
    return Refusal(404, "NOT_FOUND", f"The requested URL {path} was not found on this server.")


# ---------------------------------------------------------------------- a call


def rest_call(verb: str, url: str, body: bytes) -> tuple[Method | None, Refusal | None]:
    """A REST request (its path with the query) checked: its method, and why it is refused (None: it is not)."""
    parts = urlsplit(url)
    method = discovery.find(verb, parts.path)
    if method is None:
        return None, not_found(parts.path)
    values = method.path_values(parts.path) or {}
    path = {name: unquote(value) for name, value in values.items()}
    query = parse_qs(parts.query, keep_blank_values=True)
    payload: Any = None
    if method.request is not None:
        try:
            payload = json.loads(body) if body.strip() else {}
        except ValueError as bad:
            return method, _invalid(f"Invalid JSON payload received. {bad}.")
    return method, check_call(method, path, query, payload)


def check_call(method: Method, path: dict[str, str], query: dict[str, list[str]], body: Any) -> Refusal | None:
    """Path parameters (decoded), query parameters (as a URL carries them: strings, repeated by
    name) and the body (parsed JSON; None for a method without one) checked against `method`."""
    for name, value in path.items():
        refused = _parameter(name, method.parameters[name], [value])
        if refused is not None:
            return refused
    system = method.api.system_parameters
    for name, values in query.items():
        spec = method.parameters.get(name) or system.get(name)
        if spec is None or spec.get("location") == "path":
            last = name.rsplit(".", 1)[-1]
            return _invalid(f'Invalid JSON payload received. Unknown name "{name}": Cannot bind query parameter. '
                            f"Field '{last}' could not be found in request message.", name)
        refused = _parameter(name, spec, values)
        if refused is not None:
            return refused
    for name, spec in method.parameters.items():
        if spec.get("required") and spec.get("location") == "query" and name not in query:
            return _invalid(f"Required parameter: {name}", name)
    if method.request is None or body is None:
        return None
    top = body_field(method)
    if not isinstance(body, dict):
        return _invalid(f"Invalid JSON payload received. Expected an object at '{top or method.request}'.", top)
    found = schema_values.problem(method.api.schemas, method.request, body, top, output=False)
    return None if found is None else _invalid(*found)


def body_field(method: Method) -> str:
    """The request message's field the body fills, as Google's errors name it: the resource's
    (`node` for a Node, `instance` for an Instance), or "" when the body is the whole request
    message (a `...Request` schema, `body: "*"`). The documents do not say; this is the rule
    Google's API design guide gives resource bodies (https://google.aip.dev/133)."""
    name = method.request or ""
    return "" if name.endswith("Request") else snake(name)


def _parameter(name: str, spec: dict[str, Any], values: list[str]) -> Refusal | None:
    if len(values) > 1 and not spec.get("repeated"):
        return _invalid(f"Invalid value at '{snake(name)}': '{name}' is not repeated, got {len(values)} values", name)
    for value in values:
        kind = spec.get("type", "string")
        pattern = spec.get("pattern")
        if kind == "integer" or spec.get("format") in INT_RANGES:
            if not is_integer(value, spec.get("format", "int32")):
                return _invalid(f"Invalid value at '{snake(name)}' ({PROTO_TYPE.get(spec.get('format', ''), 'TYPE_INT32')}), "
                                f'"{value}"', name)
        elif kind == "boolean" and value not in ("true", "false"):
            return _invalid(f"Invalid value at '{snake(name)}' (TYPE_BOOL), \"{value}\"", name)
        elif kind == "number" and not is_number(value):
            return _invalid(f"Invalid value at '{snake(name)}' (TYPE_DOUBLE), \"{value}\"", name)
        if "enum" in spec and value not in spec["enum"]:
            return _invalid(f"Invalid value at '{snake(name)}' (TYPE_ENUM), \"{value}\"", name)
        if pattern is not None and re.fullmatch(pattern, value) is None:
            return _invalid(f"Invalid value for field '{name}': '{value}'. Must be a match of regex '{pattern}'", name)
    return None


# ---------------------------------------------------------------------- an answer


def answer_problem(method: Method, status: int, body: bytes, content_type: str) -> str | None:
    """What is wrong with an answer by Google's definitions (None: nothing): a success's body
    against the method's response schema, an error's against Google's error shape."""
    if not content_type.startswith("application/json"):
        return None if status == 200 else f"an error answered as {content_type}, not JSON"
    try:
        value = json.loads(body) if body else {}
    except ValueError as bad:
        return f"not JSON: {bad}"
    if status >= 400:
        return error_problem(status, value)
    if method.response is None:
        return None if value == {} else "a body where the method answers none"
    if not isinstance(value, dict):
        return "the body is not a JSON object"
    found = schema_values.problem(method.api.schemas, method.response, value, "", output=True)
    return None if found is None else f"{method.response}: {found[0]}"


def message_problem(method: Method, value: dict[str, Any]) -> str | None:
    """A gRPC answer (as its JSON) against the method's response schema."""
    if method.response is None:
        return None
    found = schema_values.problem(method.api.schemas, method.response, value, "", output=True)
    return None if found is None else f"{method.response}: {found[0]}"


def error_problem(status: int, value: Any) -> str | None:
    """An error body against Google's shape: {"error": {"code": the HTTP status, "message", "status"}}."""
    error = value.get("error") if isinstance(value, dict) else None
    if not isinstance(error, dict):
        return 'an error without {"error": {...}}'
    if error.get("code") != status:
        return f"error.code {error.get('code')!r} is not the HTTP status {status}"
    if not isinstance(error.get("message"), str):
        return "error.message is missing"
    if not isinstance(error.get("status"), str):
        return "error.status (the google.rpc code's name) is missing"
    return None
