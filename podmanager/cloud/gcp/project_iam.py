"""A project's service accounts and IAM policy through Google's JSON APIs (REST): IAM v1's
`projects.serviceAccounts` (create, the account's own policy) and Resource Manager v3's
`projects.getIamPolicy` / `setIamPolicy` / `testIamPermissions`. What `up` uses to make the
cluster's own accounts, grant them their roles, and ask, before anything bills, which of the
permissions it needs the caller lacks.

- `ensure_account` is idempotent: 409 ALREADY_EXISTS is success
  (https://docs.cloud.google.com/iam/docs/reference/rest/v1/projects.serviceAccounts/create).
- `grant` is a read-modify-write carrying the read's etag; 409 ABORTED (a concurrent change) and
  400 "does not exist" for an account made moments ago ("you might need to wait for 60 seconds or
  more before you use the service account": https://docs.cloud.google.com/iam/docs/service-accounts-create)
  run it again after a pause, until `retry_s` has passed
  (https://docs.cloud.google.com/iam/docs/policies#etag).
- `missing` asks `projects.testIamPermissions`, which needs no permission and answers the subset
  the caller holds (https://docs.cloud.google.com/resource-manager/reference/rest/v3/projects/testIamPermissions).
Errors are the taxonomy's; a 403 names the permission and the role to grant (`permissions.explain`).
Against a dry run's emulator it takes the emulator's root and the caller's emulator token.
"""

from __future__ import annotations

import time
from typing import Any, Iterable
from urllib.parse import quote

import requests

from podmanager.cloud import errors as cloud_errors
from podmanager.cloud.gcp.errors import AUTH_HINT
from podmanager.cloud.gcp.json_session import json_api_session
from podmanager.cloud.gcp.permissions import explain

IAM_ROOT = "https://iam.googleapis.com"
RESOURCE_MANAGER_ROOT = "https://cloudresourcemanager.googleapis.com"
_BY_STATUS: dict[int, type[cloud_errors.CloudError]] = {
    400: cloud_errors.InvalidRequestError, 401: cloud_errors.AuthenticationError,
    403: cloud_errors.PermissionDeniedError, 404: cloud_errors.NotFoundError, 409: cloud_errors.AlreadyExistsError,
}


class StalePolicyError(cloud_errors.CloudError):
    """The policy changed since it was read (409 ABORTED): read it again."""


def account_email(project: str, account_id: str) -> str:
    """A user-managed service account's email (https://docs.cloud.google.com/iam/docs/service-account-types)."""
    return f"{account_id}@{project}.iam.gserviceaccount.com"


class ProjectIam:
    """One project's accounts and policy. endpoint: a dry run's emulator root; None: Google's,
    with `credentials`. `caller`: who calls, named in a refusal (a dry run's principal)."""

    def __init__(self, project: str, *, endpoint: str | None = None, credentials: Any = None,
                 caller: str | None = None, timeout_s: float = 30.0, retry_s: float = 120.0,
                 pause_s: float = 2.0):
        self.project = project
        self.iam_root = endpoint or IAM_ROOT
        self.manager_root = endpoint or RESOURCE_MANAGER_ROOT
        self.caller = caller
        self.timeout_s = timeout_s
        self.retry_s = retry_s
        self.pause_s = pause_s
        self._session = json_api_session(endpoint, credentials)

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> ProjectIam:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ asked before anything is made

    def missing(self, permissions: Iterable[str]) -> list[str]:
        """Those of `permissions` the caller does not hold on the project, in the order given."""
        asked = list(dict.fromkeys(permissions))
        body = self._call("POST", f"{self.manager_root}/v3/projects/{self.project}:testIamPermissions",
                          "test your permissions on the project", json={"permissions": asked})
        held = set(body.get("permissions", []))
        return [p for p in asked if p not in held]

    # ------------------------------------------------------------------ accounts

    def ensure_account(self, account_id: str, display_name: str) -> tuple[str, bool]:
        """The account's email, made unless it exists; and whether this call made it."""
        try:
            self._call("POST", f"{self.iam_root}/v1/projects/{self.project}/serviceAccounts",
                       f"create service account {account_id}",
                       json={"accountId": account_id, "serviceAccount": {"displayName": display_name}})
        except cloud_errors.AlreadyExistsError:
            return account_email(self.project, account_id), False
        return account_email(self.project, account_id), True

    # ------------------------------------------------------------------ policies

    def grant(self, grants: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        """Each (role, member) bound on the project unless it is already; the pairs added."""
        url = f"{self.manager_root}/v3/projects/{self.project}"
        return self._grant(url, list(grants), f"project {self.project}")

    def grant_on_account(self, email: str, grants: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        """Each (role, member) bound on the service account itself (who may act as it)."""
        url = f"{self.iam_root}/v1/projects/{self.project}/serviceAccounts/{quote(email, safe='@')}"
        return self._grant(url, list(grants), f"service account {email}")

    def _grant(self, url: str, grants: list[tuple[str, str]], what: str) -> list[tuple[str, str]]:
        deadline = time.monotonic() + self.retry_s
        while True:
            try:
                return self._grant_once(url, grants, what)
            except (StalePolicyError, cloud_errors.InvalidRequestError) as failed:
                retryable = isinstance(failed, StalePolicyError) or "does not exist" in failed.message
                if not retryable or time.monotonic() + self.pause_s > deadline:
                    raise
            time.sleep(self.pause_s)

    def _grant_once(self, url: str, grants: list[tuple[str, str]], what: str) -> list[tuple[str, str]]:
        # Version 3: a policy with conditional bindings is read whole, so writing it back loses none.
        policy = self._call("POST", f"{url}:getIamPolicy", f"read the IAM policy of {what}",
                            json={"options": {"requestedPolicyVersion": 3}})
        bindings: list[dict[str, Any]] = policy.setdefault("bindings", [])
        added = []
        for role, member in grants:
            plain = [b for b in bindings if b.get("role") == role and not b.get("condition")]
            if any(member in b.get("members", []) for b in plain):
                continue
            if plain:
                plain[0].setdefault("members", []).append(member)
            else:
                bindings.append({"role": role, "members": [member]})
            added.append((role, member))
        if added:
            self._call("POST", f"{url}:setIamPolicy",
                       f"grant {', '.join(f'{role} to {member}' for role, member in added)} on {what}",
                       json={"policy": policy})
        return added

    def _call(self, method: str, url: str, what: str, **body: Any) -> dict[str, Any]:
        try:
            response = self._session.request(method, url, timeout=self.timeout_s, **body)
        except requests.exceptions.RequestException as failed:
            raise cloud_errors.TransientError(f"{what}: cannot reach {url.split('/v')[0]}: {failed}") from failed
        if response.status_code < 400:
            return response.json() if response.content else {}
        message, details = _error(response)
        if response.status_code == 409 and "ABORTED" in response.text:
            raise StalePolicyError(f"{what}: the policy changed meanwhile")
        if response.status_code == 403:
            explained = explain(message, details, self.caller)
            if explained is not None:
                explained.message = f"{what}: {explained.message}"
                explained.args = (explained.message,)
                raise explained
        kind = _BY_STATUS.get(response.status_code, cloud_errors.TransientError if response.status_code >= 500
                              else cloud_errors.CloudError)
        raise kind(f"{what}: {message} (HTTP {response.status_code})",
                   hint=AUTH_HINT if kind is cloud_errors.AuthenticationError else None)


def _error(response: requests.Response) -> tuple[str, list[Any]]:
    try:
        error = response.json()["error"]
        return str(error.get("message", "")), list(error.get("details") or [])
    except (ValueError, KeyError, TypeError, AttributeError):
        return response.text[:300], []
