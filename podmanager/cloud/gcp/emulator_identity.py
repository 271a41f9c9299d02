"""Who a dry run's client is to the project's emulator: the bearer token every call carries.

Google Cloud knows every caller by an OAuth token; so does the emulator (issue 45). A process
on a simulated VM (its metadata server named by `GCE_METADATA_HOST`, as Google's libraries find
a real VM's) calls as the VM's service account, with the token its metadata server hands out;
any other process calls as the laptop's user, with the token of the simulated application
default credentials the emulator issues (owner-only, in the simulated cloud's folder). A real
VM has no user's credentials file either, so a VM's process never falls back to the user's.
No token found: calls go without one, and the emulator answers 401 as Google does.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import grpc
import requests

from podmanager.core import paths

ADC_FILE = "application_default_credentials.json"
METADATA_ENV = "GCE_METADATA_HOST"
_TOKEN_PATH = "/computeMetadata/v1/instance/service-accounts/default"


def adc_path() -> Path:
    """The simulated application default credentials (`{"account": PRINCIPAL, "access_token": ...}`)."""
    return paths.sim_home() / "sim" / "iam" / ADC_FILE


def _from_metadata(what: str) -> str | None:
    host = os.environ.get(METADATA_ENV)
    if not host:
        return None
    try:
        answer = requests.get(f"http://{host}{_TOKEN_PATH}/{what}", headers={"Metadata-Flavor": "Google"}, timeout=10)
    except requests.RequestException:
        return None
    return answer.text if answer.ok else None


def _adc() -> dict[str, Any]:
    try:
        return json.loads(adc_path().read_text())
    except (OSError, ValueError):
        return {}


def token() -> str | None:
    """This process's bearer token for the emulator; None when it has none."""
    if os.environ.get(METADATA_ENV):
        found = _from_metadata("token")
        return json.loads(found)["access_token"] if found else None
    return _adc().get("access_token")


def principal() -> str | None:
    """Whom the emulator takes this process for (`user:...`, `serviceAccount:...`); None: no one."""
    if os.environ.get(METADATA_ENV):
        email = _from_metadata("email")
        return f"serviceAccount:{email}" if email else None
    return _adc().get("account")


class _Bearer(grpc.UnaryUnaryClientInterceptor):
    """Adds `authorization: Bearer TOKEN` to every call, as Google's call credentials do (they
    refuse an insecure channel, which is what the emulator serves)."""

    def __init__(self, bearer: str):
        self.bearer = bearer

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        metadata = [*(details.metadata or ()), ("authorization", f"Bearer {self.bearer}")]
        return continuation(details._replace(metadata=metadata), request)


def insecure_channel(address: str) -> grpc.Channel:
    """A plain gRPC channel to the emulator whose calls carry this process's token (if any)."""
    channel = grpc.insecure_channel(address)
    bearer = token()
    return grpc.intercept_channel(channel, _Bearer(bearer)) if bearer else channel


def credentials() -> Any:
    """Google's credentials type holding this process's token, for the REST clients; anonymous without one."""
    bearer = token()
    if bearer is None:
        from google.auth.credentials import AnonymousCredentials

        return AnonymousCredentials()
    from google.oauth2.credentials import Credentials

    return Credentials(bearer)
