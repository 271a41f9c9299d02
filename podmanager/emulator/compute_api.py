"""The simulated project's Compute Engine served as its REST API (`/compute/v1/...`), to
`google-cloud-compute`'s own clients (`ClientOptions(api_endpoint="http://HOST:PORT")`, any
credentials): what the preflight of `up` reads, the firewall rules it makes, and the controller VM.

Served (`compute_calls.py`): the project (its default service account), networks (get, list, delete), subnetworks (get, list per region,
delete, setPrivateIpGoogleAccess), firewalls (get, list, insert, delete), routers (get, list per
region, insert, delete) and global, region and zone operations (get, wait); (`instance_calls.py`)
zones (get, list), machine types (get) and instances (insert, get, list per zone or aggregated
with a label filter, delete, getGuestAttributes: what the VM PUT on its metadata server; start,
resume, stop, suspend). Bodies and answers are
the client library's own types (`compute_v1`), read and written as their JSON, so a field the
client sends or expects by another name fails here as it would on Google. Every call is logged
in the emulator's request log (`TpuEmulator.requests`, as `compute.<collection>.<verb>` with the
library's request message), which `requests` of the control service returns.

The library takes seconds to import (one module holds every Compute Engine type), so the
emulator starts without it: `warm()` imports it in the background, and the first call waits
for that import if it is not done.
"""

from __future__ import annotations

import json
import re
import threading
import time
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

from podmanager.cloud import errors as cloud_errors
from podmanager.emulator import rest, rulebook
from podmanager.emulator.sim.cloud import SimCloud

# A collection in the project (zones), globally, in a region, in a zone, or over every zone (aggregated).
_PATH = re.compile(r"^/compute/v1/projects/(?P<project>[^/]+)/"
                   r"(?:global/|regions/(?P<region>[^/]+)/|zones/(?P<zone>[^/]+)/|aggregated/)?"
                   r"(?P<collection>networks|subnetworks|firewalls|routers|operations|instances|machineTypes|zones)"
                   r"(?:/(?P<name>[^/]+)(?:/(?P<verb>wait|setPrivateIpGoogleAccess|getGuestAttributes|start|resume|stop|suspend))?)?$")
_PROJECT = re.compile(r"^/compute/v1/projects/(?P<project>[^/]+)$")
_HTTP = {cloud_errors.NotFoundError: (404, "NOT_FOUND"), cloud_errors.AlreadyExistsError: (409, "ALREADY_EXISTS"),
         cloud_errors.PermissionDeniedError: (403, "PERMISSION_DENIED"),
         cloud_errors.InvalidRequestError: (400, "INVALID_ARGUMENT")}

Log = Callable[[str, Any], None]  # (method, the library's request message): the emulator's request log
WAIT_POLL_S = 0.05  # how often a held `wait` looks at its operation again


class ComputeApi:
    """A `rest.RequestRoute` over `sim`'s network side; `log` is told every call."""

    def __init__(self, sim: SimCloud, log: Log):
        self.sim = sim
        self.log = log
        # Google's deadline of an operation's `wait`; a test shortens it to see a wait end undone.
        self.wait_deadline_s = rulebook.OPERATION_WAIT_DEADLINE_S

    @staticmethod
    def warm() -> None:
        """Import the calls (and the client library) in the background."""
        threading.Thread(target=_calls, name="emulator-compute-import", daemon=True).start()

    def __call__(self, request: rest.Request) -> rest.Answer | None:
        url = urlsplit(request.path)
        project = _PROJECT.match(url.path)
        if project is not None and request.method == "GET":  # the project: its default service account
            message = _calls()[0].get_project(project["project"], self.log)
            return rest.Answer(200, type(message).to_json(message, use_integers_for_enums=False).encode())
        match = _PATH.match(url.path)
        if match is None:
            return None
        where = match.groupdict()
        calls, routes = _calls()
        handler = routes.get((request.method, where["collection"], bool(where["name"]), where["verb"]))
        if handler is None:
            return rest.error_answer(405, "METHOD_NOT_ALLOWED", f"the emulator does not serve {request.method} {request.path}")
        try:
            body = json.loads(request.body) if request.body else {}
            message = self._answer(calls, handler, where, body, parse_qs(url.query))
        except cloud_errors.CloudError as error:
            status, code = _HTTP.get(type(error), (500, "INTERNAL"))
            return rest.error_answer(status, code, error.message)
        except ValueError as bad:
            return rest.error_answer(400, "INVALID_ARGUMENT", f"malformed request body: {bad}")
        return rest.Answer(200, type(message).to_json(message, use_integers_for_enums=False).encode())


    def _answer(self, calls: Any, handler: Any, where: dict[str, Any], body: dict[str, Any],
                query: dict[str, list[str]]) -> Any:
        """The handler's message; an operation's `wait` asks again, without holding the simulated
        cloud, until the operation is DONE or the wait's deadline passes (`rulebook`)."""
        deadline = time.monotonic() + self.wait_deadline_s
        log = self.log
        while True:
            with self.sim.compute() as project:
                message = handler(calls.Call(project, log, where, body, query=query))
            if where["verb"] != "wait" or message.status == message.Status.DONE or time.monotonic() >= deadline:
                return message
            log = _unlogged  # one wait, logged once
            time.sleep(min(WAIT_POLL_S, max(0.0, deadline - time.monotonic())))


def _unlogged(method: str, request: Any) -> None:
    pass


def _calls() -> tuple[Any, dict[tuple[str, str, bool, str | None], Any]]:
    """The calls' module (its `Call`) and every route."""
    from podmanager.emulator import compute_calls, instance_calls

    return compute_calls, {**compute_calls.ROUTES, **instance_calls.ROUTES}
