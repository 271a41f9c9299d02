"""The simulated project's Compute Engine served as its REST API (`/compute/v1/...`), in the API's
JSON: to podmanager's own client (`cloud/gcp/compute.py`) and to `google-cloud-compute`'s
(`ClientOptions(api_endpoint="http://HOST:PORT")`, any credentials) alike: what the preflight of
`up` reads, the firewall rules it makes, and the controller VM.

Served (`compute_calls.py`): the project (its default service account), networks (get, list, delete), subnetworks (get, list per region,
delete, setPrivateIpGoogleAccess), firewalls (get, list, insert, delete), routers (get, list per
region, insert, delete) and global, region and zone operations (get, wait); (`instance_calls.py`)
zones (get, list), machine types (get) and instances (insert, get, list per zone or aggregated
with a label filter, delete, getGuestAttributes: what the VM PUT on its metadata server; start,
resume, stop, suspend, reset, setMachineType, setMetadata) and disks (resize). Bodies and answers are plain JSON under the names of Google's discovery
document, which the REST door checks every request against (and, in strict mode, every answer:
`schema_gate.py`), so a field sent or expected by another name fails here as it would on Google.
Every call is logged in the emulator's request log (`TpuEmulator.requests`, as
`compute.<collection>.<verb>` with its parameters and body: `compute_calls.Call.request`), which
`requests` of the control service returns.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

from podmanager.cloud import errors as cloud_errors
from podmanager.emulator import compute_calls, instance_calls, rest, rulebook
from podmanager.emulator.compute_calls import Call, Json
from podmanager.emulator.sim.cloud import SimCloud

# A collection in the project (zones), globally, in a region, in a zone, or over every zone (aggregated).
_PATH = re.compile(r"^/compute/v1/projects/(?P<project>[^/]+)/"
                   r"(?:global/|regions/(?P<region>[^/]+)/|zones/(?P<zone>[^/]+)/|aggregated/)?"
                   r"(?P<collection>networks|subnetworks|firewalls|routers|operations|instances|disks|machineTypes|zones)"
                   r"(?:/(?P<name>[^/]+)(?:/(?P<verb>wait|setPrivateIpGoogleAccess|getGuestAttributes|start|resume|stop"
                   r"|suspend|reset|setMachineType|setMetadata|resize))?)?$")
_PROJECT = re.compile(r"^/compute/v1/projects/(?P<project>[^/]+)$")
_HTTP = {cloud_errors.NotFoundError: (404, "NOT_FOUND"), cloud_errors.AlreadyExistsError: (409, "ALREADY_EXISTS"),
         cloud_errors.PermissionDeniedError: (403, "PERMISSION_DENIED"),
         rulebook.ConditionNotMet: (412, "FAILED_PRECONDITION"),
         cloud_errors.InvalidRequestError: (400, "INVALID_ARGUMENT")}

Log = Callable[[str, Json], None]  # (method, the request: `Call.request`): the emulator's request log
ROUTES = {**compute_calls.ROUTES, **instance_calls.ROUTES}
WAIT_POLL_S = 0.05  # how often a held `wait` looks at its operation again


class ComputeApi:
    """A `rest.RequestRoute` over `sim`'s network side; `log` is told every call."""

    def __init__(self, sim: SimCloud, log: Log):
        self.sim = sim
        self.log = log
        # Google's deadline of an operation's `wait`; a test shortens it to see a wait end undone.
        self.wait_deadline_s = rulebook.OPERATION_WAIT_DEADLINE_S

    def __call__(self, request: rest.Request) -> rest.Answer | None:
        url = urlsplit(request.path)
        project = _PROJECT.match(url.path)
        if project is not None and request.method == "GET":  # the project: its default service account
            return rest.json_answer(200, compute_calls.get_project(project["project"], self.log))
        match = _PATH.match(url.path)
        if match is None:
            return None
        where = match.groupdict()
        handler = ROUTES.get((request.method, where["collection"], bool(where["name"]), where["verb"]))
        if handler is None:
            return rest.error_answer(405, "METHOD_NOT_ALLOWED", f"the emulator does not serve {request.method} {request.path}")
        try:
            body = json.loads(request.body) if request.body else {}
            answer = self._answer(handler, where, body, parse_qs(url.query))
        except cloud_errors.CloudError as error:
            status, code = _HTTP.get(type(error), (500, "INTERNAL"))
            return rest.error_answer(status, code, error.message)
        except ValueError as bad:
            return rest.error_answer(400, "INVALID_ARGUMENT", f"malformed request body: {bad}")
        return rest.json_answer(200, answer)

    def _answer(self, handler: Callable[[Call], Json], where: dict[str, Any], body: Json,
                query: dict[str, list[str]]) -> Json:
        """The handler's answer; an operation's `wait` asks again, without holding the simulated
        cloud, until the operation is DONE or the wait's deadline passes (`rulebook`)."""
        deadline = time.monotonic() + self.wait_deadline_s
        log = self.log
        while True:
            with self.sim.compute() as project:
                answer = handler(Call(project, log, where, body, query=query))
            if where["verb"] != "wait" or answer.get("status") == "DONE" or time.monotonic() >= deadline:
                return answer
            log = _unlogged  # one wait, logged once
            time.sleep(min(WAIT_POLL_S, max(0.0, deadline - time.monotonic())))


def _unlogged(method: str, request: Json) -> None:
    pass
