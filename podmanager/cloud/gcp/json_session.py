"""The HTTP session of a client of Google's JSON APIs (Service Usage, Cloud Storage's IAM, Compute Engine): on
Google Cloud, the caller's credentials with the cloud-platform scope; in a dry run, the
emulator's token for whoever calls (`emulator_identity`), or none, which it answers with 401."""

from __future__ import annotations

from typing import Any

import requests

CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"


def json_api_session(endpoint: str | None, credentials: Any) -> requests.Session:
    """A session for the emulator at `endpoint`, else for Google with `credentials`."""
    if endpoint:
        from podmanager.cloud.gcp.emulator_identity import token

        session = requests.Session()
        bearer = token()
        if bearer:
            session.headers["Authorization"] = f"Bearer {bearer}"
        return session
    from google.auth.credentials import with_scopes_if_required
    from google.auth.transport.requests import AuthorizedSession

    return AuthorizedSession(with_scopes_if_required(credentials, [CLOUD_PLATFORM]))
