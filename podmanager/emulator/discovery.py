"""Google's own API definitions, as the emulator's schema: the discovery documents that
`google-api-python-client` ships (`googleapiclient/discovery_cache/documents/`), read from the
installed package, never from the network, and indexed for the emulator's requests.

A document (https://developers.google.com/discovery/v1/reference/apis) lists every method of
an API: its id (`compute.instances.insert`), HTTP verb, path under the API's `servicePath`
(`flatPath`: one `{param}` per path segment; `path`: with `{+name}` for a parameter that spans
segments), parameters (where, type, pattern, enum) and request and response schemas (`$ref`
into `schemas`), and the system parameters every method takes (its top-level `parameters`).

`api(name)` loads one document once per process; `find(verb, path)` is the method a REST
request names, by a trie over the served APIs' paths (a few dict look-ups a request);
`method(id)` is a method by its id (the gRPC side's way in).
"""

from __future__ import annotations

import functools
import json
import re
import threading
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

# The documents the emulator's requests are checked against (name.version, as the package names them).
DOCUMENTS = ("compute.v1", "tpu.v2", "secretmanager.v1", "storage.v1", "iam.v1", "cloudresourcemanager.v3",
             "serviceusage.v1")
PACKAGE = "googleapiclient.discovery_cache.documents"

# System parameters also go by a "$" name (https://cloud.google.com/apis/docs/system-parameters:
# "$alt, alt", "$fields, fields", ..., "$ct" for the Content-Type override).
_DOLLAR_FORMS = frozenset({"$ct", "$alt", "$callback", "$fields", "$prettyPrint", "$quotaUser", "$userProject"})

_PARAM = re.compile(r"\{(\+?)([^}]+)\}")


@dataclass(frozen=True, eq=False)
class Method:
    """One method of a document."""

    id: str  # e.g. compute.instances.insert
    api: Api = field(repr=False)
    verb: str  # the HTTP method
    template: str  # the URL path with its declared parameters, from "/": /v2/{+parent}/nodes
    flat: str  # the same with one parameter a segment: /v2/projects/{projectsId}/locations/{locationsId}/nodes
    parameters: dict[str, dict[str, Any]] = field(repr=False)
    request: str | None  # the body's schema name
    response: str | None

    @functools.cached_property
    def path_pattern(self) -> re.Pattern[str]:
        """The template as a regex naming each path parameter ({+x}: any text, {x}: one segment)."""
        out, last = [], 0
        for match in _PARAM.finditer(self.template):
            out.append(re.escape(self.template[last:match.start()]))
            out.append(f"(?P<{_group(match[2])}>{'.+' if match[1] else '[^/]+'})")
            last = match.end()
        out.append(re.escape(self.template[last:]))
        return re.compile("".join(out))

    def path_values(self, path: str) -> dict[str, str] | None:
        """The path parameters' raw (still URL-encoded) values in `path`; None if it is not this method's."""
        found = self.path_pattern.fullmatch(path)
        if found is None:
            return None
        return {name: found[_group(name)] for name in self.parameters if _group(name) in found.groupdict()}


def _group(name: str) -> str:
    return re.sub(r"\W", "_", name)


@dataclass
class _Node:
    """One path segment of the trie: literal segments, a `{param}` segment, a `{param}:verb`
    segment (by its ":verb") and the methods whose path ends here, by HTTP verb."""

    literal: dict[str, _Node] = field(default_factory=dict)
    any: _Node | None = None
    custom: dict[str, _Node] = field(default_factory=dict)
    methods: dict[str, list[Method]] = field(default_factory=dict)


@dataclass
class Api:
    """One loaded document."""

    name: str  # e.g. compute.v1
    revision: str
    service_path: str  # the URL path every method's path sits under, from "/": /compute/v1/
    schemas: dict[str, dict[str, Any]] = field(repr=False)
    system_parameters: dict[str, dict[str, Any]] = field(repr=False)
    methods: dict[str, Method] = field(repr=False)


@functools.lru_cache(maxsize=None)
def api(name: str) -> Api:
    """One document, loaded from the installed package (`name` as in DOCUMENTS)."""
    document = json.loads(resources.files(PACKAGE).joinpath(f"{name}.json").read_text(encoding="utf-8"))
    system = dict(document.get("parameters", {}))
    for dollar in _DOLLAR_FORMS:
        system.setdefault(dollar, system.get(dollar[1:], {"type": "string", "location": "query"}))
    loaded = Api(name=name, revision=document["revision"], service_path="/" + document.get("servicePath", ""),
                 schemas=document["schemas"], system_parameters=system, methods={})
    for found in _walk(document):
        method = Method(id=found["id"], api=loaded, verb=found["httpMethod"],
                        template=loaded.service_path + found["path"],
                        flat=loaded.service_path + found.get("flatPath", found["path"]),
                        parameters=found.get("parameters", {}),
                        request=found.get("request", {}).get("$ref"), response=found.get("response", {}).get("$ref"))
        loaded.methods[method.id] = method
    return loaded


def warm() -> None:
    """Load the documents and the index in the background (about a second on a busy machine),
    so the emulator's first request does not wait for them."""
    threading.Thread(target=_trie, name="emulator-discovery-load", daemon=True).start()


def _walk(part: dict[str, Any]) -> list[dict[str, Any]]:
    found = list(part.get("methods", {}).values())
    for child in part.get("resources", {}).values():
        found.extend(_walk(child))
    return found


def revisions() -> dict[str, str]:
    """Each document's revision (the date Google generated it), as installed."""
    return {name: api(name).revision for name in DOCUMENTS}


def method(method_id: str) -> Method:
    """A method by its id (`tpu.projects.locations.nodes.create`); KeyError if no document has it."""
    for name in DOCUMENTS:
        if method_id.startswith(name.split(".")[0] + "."):
            return api(name).methods[method_id]
    raise KeyError(method_id)


@functools.lru_cache(maxsize=None)
def _trie() -> _Node:
    """Every served document's methods by their flat path (one parameter a segment: no document
    here has a flat path whose parameter spans segments; Cloud Storage's have no flat path, and
    their `path` has one parameter a segment)."""
    root = _Node()
    for name in DOCUMENTS:
        for found in api(name).methods.values():
            node = root
            for segment in found.flat.strip("/").split("/"):
                if _PARAM.fullmatch(segment):
                    node.any = node.any or _Node()
                    node = node.any
                elif segment.startswith("{"):  # {param}:verb, a custom method
                    node = node.custom.setdefault(":" + segment.rpartition(":")[2], _Node())
                else:
                    node = node.literal.setdefault(segment, _Node())
            node.methods.setdefault(found.verb, []).append(found)
    return root


def find(verb: str, path: str) -> Method | None:
    """The method a request's verb and URL path (without its query) name; None if no served
    API has one. Of several that match, the one with the most literal segments
    (`versions/{v}:access` over `versions/{v}`)."""
    ends = _ends(_trie(), path.strip("/").split("/"), 0, 0)
    matches = [(literal, candidate) for literal, node in ends for candidate in node.methods.get(verb, ())]
    return max(matches, key=lambda pair: pair[0])[1] if matches else None


def _ends(node: _Node, segments: list[str], index: int, literal: int) -> list[tuple[int, _Node]]:
    """Every node with methods the segments from `index` on lead to, with how many literal parts matched."""
    if index == len(segments):
        return [(literal, node)] if node.methods else []
    segment = segments[index]
    found: list[tuple[int, _Node]] = []
    child = node.literal.get(segment)
    if child is not None:
        found.extend(_ends(child, segments, index + 1, literal + 1))
    head, colon, verb = segment.rpartition(":")
    custom = node.custom.get(":" + verb) if colon and head else None
    if custom is not None:
        found.extend(_ends(custom, segments, index + 1, literal + 1))
    if node.any is not None and segment:
        found.extend(_ends(node.any, segments, index + 1, literal))
    return found
