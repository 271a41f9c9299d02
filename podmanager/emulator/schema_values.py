"""A JSON value against a discovery document's schema (`discovery.py`): the body of a request
as Google's JSON parser reads it, or an answer as Google writes JSON.

Each schema is compiled once into nested checks (a closure a schema, a field looked up by
name), so a check walks only the value: the strict mode checks every answer the tests get,
pages of a hundred nodes among them. A check raises `_Bad` at the first problem; the path to
it is gathered on the way out and spelled as Google's errors spell it (proto field names,
`disks[0]`, a map's entries as `labels[2].value`).

Read as proto3's JSON mapping reads it (https://protobuf.dev/programming-guides/json/): an
int32 or int64 as a number or a numeric string, an enum by name or number, null as the field's
default. Written as Google writes it: an int64 as a string, an enum by name, no null.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any, Callable

Check = Callable[[Any], None]

INT_RANGES = {"int32": (-2**31, 2**31 - 1), "uint32": (0, 2**32 - 1), "int64": (-2**63, 2**63 - 1),
              "uint64": (0, 2**64 - 1)}
PROTO_TYPE = {"int32": "TYPE_INT32", "uint32": "TYPE_UINT32", "int64": "TYPE_INT64", "uint64": "TYPE_UINT64",
              "double": "TYPE_DOUBLE", "float": "TYPE_FLOAT", "byte": "TYPE_BYTES"}
_FORMATS = {
    "byte": re.compile(r"^[A-Za-z0-9+/_-]*={0,2}$"),
    "google-datetime": re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)$"),
    "date-time": re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)$"),
    "google-duration": re.compile(r"^-?\d+(\.\d{1,9})?s$"),
}


class _Bad(Exception):
    """The first problem of a value: `kind` (unknown, repeated, value, null, int64), the field's
    name, the value and its proto type; `path` from the problem outwards, (how, name or index)."""

    def __init__(self, kind: str, *, name: str = "", value: Any = None, proto: str = ""):
        super().__init__(kind)
        self.kind, self.name, self.value, self.proto = kind, name, value, proto
        self.path: list[tuple[str, Any]] = []


def problem(schemas: dict[str, dict[str, Any]], schema_name: str, value: Any, top: str, *,
            output: bool) -> tuple[str, str] | None:
    """The first problem of `value` as the schema `schema_name`: (Google's message, the field
    it names), or None. `top`: the name of the value in the request ("node"; "" for none)."""
    try:
        _compiled(schemas, schema_name, output)(value)
    except _Bad as bad:
        return _message(bad, top)
    return None


def _message(bad: _Bad, top: str) -> tuple[str, str]:
    parts = bad.path[::-1]
    where = _where(top, parts)
    if bad.kind == "unknown":
        at = f" at '{where}'" if where else ""
        return f'Invalid JSON payload received. Unknown name "{bad.name}"{at}: Cannot find field.', where
    if bad.kind == "repeated":
        parent = _where(top, parts[:-1])
        at = f" at '{parent}'" if parent else ""
        return (f'Invalid JSON payload received. Unknown name "{bad.name}"{at}: '
                "Proto field is not repeating, cannot start list."), where
    if bad.kind == "null":
        return f"null at '{where}': Google writes no null", where
    if bad.kind == "int64":
        return f"'{where}' ({bad.proto}) is {json.dumps(bad.value)}: Google writes an int64 as a string", where
    return f"Invalid value at '{where}' ({bad.proto}), {json.dumps(bad.value)}", where


def _where(top: str, parts: list[tuple[str, Any]]) -> str:
    out = top
    for how, key in parts:
        if how == "field":
            out = f"{out}.{snake(key)}" if out else snake(key)
        elif how == "index":
            out += f"[{key}]"
        else:  # a map's entry
            out += f"[{key}].value"
    return out


def snake(name: str) -> str:
    """A JSON (lowerCamel) name as the proto field Google's errors name: networkInterfaces -> network_interfaces."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower() if name and not name.islower() else name


def is_integer(value: Any, form: str) -> bool:
    """An integer in the format's range, as a number (an integral float too) or a numeric string."""
    if isinstance(value, bool):
        return False
    if isinstance(value, float):
        if not value.is_integer():
            return False
        value = int(value)
    if isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            return False
    low, high = INT_RANGES.get(form, INT_RANGES["int32"])
    return isinstance(value, int) and low <= value <= high


def is_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return True
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


# ---------------------------------------------------------------------- compiling a schema


_CACHE: dict[tuple[int, str, bool], Check] = {}  # published checks: any thread may use them
# Checks compiled in the current compilation, and stand-ins for the schemas still compiling (a
# schema that holds itself reaches its own check through one). Seen only under the lock, and
# published together when the outermost schema is done: the emulator serves each call on its own
# thread, and CI saw two first CreateNode calls at once fail on another thread's stand-in.
_STAGED: dict[tuple[int, str, bool], Check] = {}
_COMPILING = threading.RLock()  # reentrant: compiling recurses


def _compiled(schemas: dict[str, dict[str, Any]], name: str, output: bool) -> Check:
    """The check of the named schema, compiled once."""
    key = (id(schemas), name, output)
    found = _CACHE.get(key)
    if found is not None:
        return found
    with _COMPILING:
        found = _CACHE.get(key) or _STAGED.get(key)
        if found is not None:
            return found
        outermost = not _STAGED
        compiled: list[Check] = []
        _STAGED[key] = lambda value: compiled[0](value)
        try:
            check = _compile(schemas, schemas[name], output)
            compiled.append(check)
            _STAGED[key] = check
            if outermost:
                _CACHE.update(_STAGED)
        finally:
            if outermost:
                _STAGED.clear()
        return check


def _compile(schemas: dict[str, dict[str, Any]], spec: dict[str, Any], output: bool) -> Check:
    if "$ref" in spec:
        return _compiled(schemas, spec["$ref"], output)
    kind = spec.get("type")
    if kind == "any":
        return _anything
    if kind == "array":
        return _array(_compile(schemas, spec["items"], output), _proto(schemas, spec["items"]))
    if kind == "object" or "properties" in spec:
        fields = {name: _compile(schemas, sub, output) for name, sub in spec.get("properties", {}).items()}
        repeated = frozenset(name for name, sub in spec.get("properties", {}).items() if sub.get("type") == "array")
        extra = spec.get("additionalProperties")
        return _object(fields, repeated, _compile(schemas, extra, output) if extra is not None else None, output)
    return _scalar(spec, output)


def _proto(schemas: dict[str, dict[str, Any]], spec: dict[str, Any]) -> str:
    """The proto type Google's errors name for a value of this schema."""
    while "$ref" in spec:
        spec = schemas[spec["$ref"]]
    kind, form = spec.get("type", "string"), spec.get("format", "")
    if "enum" in spec:
        return "TYPE_ENUM"
    if kind in ("object", "array") or "properties" in spec:
        return "TYPE_MESSAGE"
    if kind == "boolean":
        return "TYPE_BOOL"
    return PROTO_TYPE.get(form, "TYPE_INT32" if kind == "integer" else "TYPE_STRING")


def _anything(value: Any) -> None:
    return None


def _array(item: Check, proto: str) -> Check:
    def check(value: Any) -> None:
        if not isinstance(value, list):
            raise _Bad("value", value=value, proto=proto)
        for index, element in enumerate(value):
            try:
                item(element)
            except _Bad as bad:
                bad.path.append(("index", index))
                raise

    return check


def _object(fields: dict[str, Check], repeated: frozenset[str], extra: Check | None, output: bool) -> Check:
    def check(value: Any) -> None:
        if not isinstance(value, dict):  # (an Any comes as an OrderedDict)
            raise _Bad("value", value=value, proto="TYPE_MESSAGE")
        for index, (name, item) in enumerate(value.items()):
            field = fields.get(name)
            if item is None:  # proto3 JSON: the field's default; Google never writes it
                if output:
                    bad = _Bad("null", name=name)
                    bad.path.append(("field", name) if field is not None else ("entry", index))
                    raise bad
                if field is None and extra is None:
                    raise _Bad("unknown", name=name)
                continue
            if field is None:
                if extra is None:
                    raise _Bad("unknown", name=name)
                try:
                    extra(item)
                except _Bad as bad:
                    bad.path.append(("entry", index))
                    raise
                continue
            try:
                if isinstance(item, list) and name not in repeated:
                    raise _Bad("repeated", name=name)
                field(item)
            except _Bad as bad:
                bad.path.append(("field", name))
                raise

    return check


def _scalar(spec: dict[str, Any], output: bool) -> Check:
    kind, form = spec.get("type", "string"), spec.get("format", "")
    proto = _proto({}, spec)
    if "enum" in spec:
        names = frozenset(spec["enum"])

        def enum(value: Any) -> None:
            if type(value) is str and value in names:
                return
            if not output and type(value) is int:  # by number, as proto3 JSON reads an enum
                return
            raise _Bad("value", value=value, proto=proto)

        return enum
    if kind == "boolean":
        def boolean(value: Any) -> None:
            if type(value) is not bool:
                raise _Bad("value", value=value, proto=proto)

        return boolean
    if kind in ("integer", "number") or form in ("int64", "uint64"):
        wide = form in ("int64", "uint64")
        low, high = INT_RANGES.get(form or "int32", INT_RANGES["int32"])

        def number(value: Any) -> None:
            if output:
                if wide and type(value) is int:
                    raise _Bad("int64", value=value, proto=proto)
                if wide and type(value) is str and is_integer(value, form):
                    return
                if not wide and kind == "integer" and type(value) is int and low <= value <= high:
                    return
                if kind == "number" and type(value) in (int, float):
                    return
            elif is_integer(value, form or "int32") if kind == "integer" or wide else is_number(value):
                return
            raise _Bad("value", value=value, proto=proto)

        return number
    pattern = _FORMATS.get(form)

    def string(value: Any) -> None:
        if type(value) is not str or (pattern is not None and pattern.match(value) is None):
            raise _Bad("value", value=value, proto=proto)

    return string
