"""Resource Manager's `projects.testIamPermissions` (v3) and Service Usage's services (v1) over
REST, on the emulator's REST port (a `rest.RequestRoute`; the gate has checked the caller); the
project's policy and its service accounts are `policy_api`'s, its custom roles `roles_api`'s.

- `POST /v3/projects/P:testIamPermissions` {"permissions": [...]}: the subset the caller holds
  (https://docs.cloud.google.com/resource-manager/reference/rest/v3/projects/testIamPermissions).
- `GET /v1/projects/P/services/S`, `GET /v1/projects/P/services`, `POST .../services/S:enable`
  (https://docs.cloud.google.com/service-usage/docs/reference/rest/v1/services): enabling is
  done at once here (on Google it takes minutes to propagate).
"""

from __future__ import annotations

import json
import re
from urllib.parse import urlsplit

from podmanager.emulator import rest
from podmanager.emulator.iam import methods, policy_api, roles_api
from podmanager.emulator.iam.gate import Gate

_TEST = re.compile(r"^/v3/projects/(?P<project>[^/:]+):testIamPermissions$")
_SERVICES = re.compile(r"^/v1/projects/(?P<project>[^/]+)/services(?:/(?P<service>[^/:]+)(?P<enable>:enable)?)?$")


class IamApi:
    def __init__(self, gate: Gate):
        self.gate = gate

    def __call__(self, request: rest.Request) -> rest.Answer | None:
        path = urlsplit(request.path).path
        who = self.gate.caller(request.headers)
        if (found := _TEST.match(path)) is not None and request.method == "POST":
            asked = json.loads(request.body or b"{}").get("permissions", [])
            held = self.gate.holding(who, asked) if isinstance(who, str) else []
            return rest.json_answer(200, {"permissions": held} if held else {})
        if (found := _SERVICES.match(path)) is None:
            return roles_api.answer(self.gate.iam, request) or policy_api.answer(self.gate.iam, request)
        number = self.gate.iam.number
        if found["enable"] and request.method == "POST":
            self.gate.iam.enable(found["service"])
            return rest.json_answer(200, {"name": "operations/noop.DONE_OPERATION", "done": True, "response": {
                "@type": "type.googleapis.com/google.api.serviceusage.v1.EnableServiceResponse",
                "service": self._service(found["service"], number)}})
        if found["service"] and request.method == "GET":
            return rest.json_answer(200, self._service(found["service"], number))
        if request.method == "GET":
            services = [self._service(s, number) for s in self.gate.iam.policy().services]
            return rest.json_answer(200, {"services": services})
        return rest.error_answer(405, "METHOD_NOT_ALLOWED", f"the emulator does not serve {request.method} {path}")

    def _service(self, service: str, number: str) -> dict[str, object]:
        return {"name": f"projects/{number}/services/{service}", "parent": f"projects/{number}",
                "config": {"name": service, "title": methods.TITLES.get(service, service)},
                "state": "ENABLED" if self.gate.iam.enabled(service) else "DISABLED"}
