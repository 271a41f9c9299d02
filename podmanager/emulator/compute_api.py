"""The simulated project's network side served as Compute Engine's REST API (`/compute/v1/...`),
to `google-cloud-compute`'s own clients (`ClientOptions(api_endpoint="http://HOST:PORT")`, any
credentials): what the preflight of `up` reads and the firewall rule it makes.

Served (`compute_calls.py`): networks (get, list, delete), subnetworks (get, list per region,
delete, setPrivateIpGoogleAccess), firewalls (get, list, insert, delete), routers (get, list per
region, insert, delete) and global and region operations (get, wait). Bodies and answers are
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
from typing import Any, Callable
from urllib.parse import urlsplit

from podmanager.cloud import errors as cloud_errors
from podmanager.emulator import rest
from podmanager.emulator.sim.cloud import SimCloud

_PATH = re.compile(r"^/compute/v1/projects/(?P<project>[^/]+)/(?:global|regions/(?P<region>[^/]+))/"
                   r"(?P<collection>networks|subnetworks|firewalls|routers|operations)"
                   r"(?:/(?P<name>[^/]+)(?:/(?P<verb>wait|setPrivateIpGoogleAccess))?)?$")
_HTTP = {cloud_errors.NotFoundError: (404, "NOT_FOUND"), cloud_errors.AlreadyExistsError: (409, "ALREADY_EXISTS"),
         cloud_errors.PermissionDeniedError: (403, "PERMISSION_DENIED"),
         cloud_errors.InvalidRequestError: (400, "INVALID_ARGUMENT")}

Log = Callable[[str, Any], None]  # (method, the library's request message): the emulator's request log


class ComputeApi:
    """A `rest.RequestRoute` over `sim`'s network side; `log` is told every call."""

    def __init__(self, sim: SimCloud, log: Log):
        self.sim = sim
        self.log = log

    @staticmethod
    def warm() -> None:
        """Import the calls (and the client library) in the background."""
        threading.Thread(target=_calls, name="emulator-compute-import", daemon=True).start()

    def __call__(self, request: rest.Request) -> rest.Answer | None:
        match = _PATH.match(urlsplit(request.path).path)
        if match is None:
            return None
        where = match.groupdict()
        calls = _calls()
        handler = calls.ROUTES.get((request.method, where["collection"], bool(where["name"]), where["verb"]))
        if handler is None:
            return rest.error_answer(405, "METHOD_NOT_ALLOWED", f"the emulator does not serve {request.method} {request.path}")
        try:
            body = json.loads(request.body) if request.body else {}
            with self.sim.compute() as project:
                message = handler(calls.Call(project, self.log, where, body))
        except cloud_errors.CloudError as error:
            status, code = _HTTP.get(type(error), (500, "INTERNAL"))
            return rest.error_answer(status, code, error.message)
        except ValueError as bad:
            return rest.error_answer(400, "INVALID_ARGUMENT", f"malformed request body: {bad}")
        return rest.Answer(200, type(message).to_json(message, use_integers_for_enums=False).encode())


def _calls() -> Any:
    from podmanager.emulator import compute_calls

    return compute_calls
