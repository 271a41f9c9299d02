"""Which APIs are enabled in a project, read through Service Usage's `services.get` (REST:
https://docs.cloud.google.com/service-usage/docs/reference/rest/v1/services/get), so the
preflight of `up` names every API a cluster needs that is off, at once, before anything is made.

A service answers its `state` (ENABLED or DISABLED) and its `name`, which carries the project's
number (`projects/NUMBER/services/SERVICE`); the activation link is Google's, as its
SERVICE_DISABLED errors give it. Reading needs `serviceusage.services.get` (Viewer and every
Compute Engine admin role hold it); a caller without it, or a Service Usage out of reach, gets
None: the calls themselves then name a disabled API when they meet it.

Against a dry run's emulator it takes the emulator's root and the caller's emulator token; on
Google Cloud, Application Default Credentials (`AuthorizedSession`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import requests

from podmanager.cloud import errors as cloud_errors
from podmanager.cloud.gcp.errors import AUTH_HINT
from podmanager.cloud.gcp.json_session import json_api_session

GOOGLE_ROOT = "https://serviceusage.googleapis.com"


@dataclass(frozen=True)
class DisabledApi:
    service: str  # tpu.googleapis.com
    title: str  # Cloud TPU API
    activation_url: str


def activation_url(service: str, project_number: str) -> str:
    return f"https://console.developers.google.com/apis/api/{service}/overview?project={project_number}"


class ServiceUsage:
    """One project's services. endpoint: a dry run's emulator root; None: Google's, with `credentials`."""

    def __init__(self, project: str, *, endpoint: str | None = None, credentials: Any = None,
                 timeout_s: float = 30.0):
        self.project = project
        self.root = endpoint or GOOGLE_ROOT
        self.timeout_s = timeout_s
        self._session = json_api_session(endpoint, credentials)

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> ServiceUsage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def disabled(self, services: Iterable[str]) -> list[DisabledApi] | None:
        """Those of `services` not enabled, in the order given; None when they cannot be read."""
        off = []
        for service in services:
            found = self._service(service)
            if found is None:
                return None
            if found.get("state") != "ENABLED":
                number = str(found.get("name", "")).split("/")[1] if found.get("name") else self.project
                title = found.get("config", {}).get("title") or service
                off.append(DisabledApi(service, title, activation_url(service, number)))
        return off

    def _service(self, service: str) -> dict[str, Any] | None:
        url = f"{self.root}/v1/projects/{self.project}/services/{service}"
        try:
            response = self._session.get(url, timeout=self.timeout_s)
        except requests.exceptions.RequestException:
            return None
        if response.status_code == 401:
            raise cloud_errors.AuthenticationError(f"read the state of {service} in project {self.project}: "
                                                   f"HTTP 401", hint=AUTH_HINT)
        if response.status_code != 200:
            return None  # 403 (no serviceusage.services.get), or Service Usage itself off or failing
        try:
            return response.json()
        except ValueError:
            return None
