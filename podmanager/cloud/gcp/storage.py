"""Cloud Storage buckets and their IAM policies through the JSON API (REST), as typed records
(`cloud/buckets.py`): whether a bucket exists, its policy read and written (with the read's
etag, so a concurrent change is never overwritten: 412, and the grant runs once more), and
whether the caller may change it (`testIamPermissions`). What the preflight of `up` asks.

Against a dry run's emulator it takes the emulator's root and sends a placeholder token; on
Google Cloud, Application Default Credentials (`AuthorizedSession`). Every call has a timeout;
an unreachable endpoint, 429 and 5xx are tried three times. Errors are the taxonomy's.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote

import requests

from podmanager.cloud import errors as cloud_errors
from podmanager.cloud.buckets import SET_POLICY_PERMISSION, BucketPolicy
from podmanager.cloud.gcp.errors import AUTH_HINT
from podmanager.cloud.gcp.json_session import json_api_session

GOOGLE_ROOT = "https://storage.googleapis.com"
_TRIES = 3
_BY_STATUS: dict[int, type[cloud_errors.CloudError]] = {
    400: cloud_errors.InvalidRequestError, 401: cloud_errors.AuthenticationError,
    403: cloud_errors.PermissionDeniedError, 404: cloud_errors.NotFoundError, 409: cloud_errors.AlreadyExistsError,
}


class StalePolicyError(cloud_errors.CloudError):
    """The policy changed since it was read (HTTP 412): read it again."""


class BucketIam:
    """Buckets of any project, by name.

    endpoint: a dry run's emulator root (http://127.0.0.1:PORT); None: Google's, with
    `credentials` (Application Default Credentials).
    """

    def __init__(self, *, endpoint: str | None = None, credentials: Any = None, timeout_s: float = 30.0,
                 retry_delay_s: float = 1.0):
        self.root = endpoint or GOOGLE_ROOT
        self.timeout_s = timeout_s
        self.retry_delay_s = retry_delay_s
        self._session = json_api_session(endpoint, credentials)

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> BucketIam:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def check_exists(self, bucket: str) -> None:
        """NotFoundError if there is no such bucket."""
        self._call("GET", bucket, "", f"read bucket {bucket}")

    def policy(self, bucket: str) -> BucketPolicy:
        # Version 3: a policy with conditional bindings is read whole, so writing it back loses none.
        body = self._call("GET", bucket, "/iam?optionsRequestedPolicyVersion=3", f"read the IAM policy of bucket {bucket}")
        return BucketPolicy.model_validate({k: body[k] for k in ("bindings", "etag", "version") if k in body})

    def may_set_policy(self, bucket: str) -> bool:
        """Whether the caller may change the bucket's IAM policy."""
        body = self._call("GET", bucket, f"/iam/testPermissions?permissions={SET_POLICY_PERMISSION}",
                          f"test the caller's permissions on bucket {bucket}")
        return SET_POLICY_PERMISSION in body.get("permissions", [])

    def grant(self, bucket: str, member: str, role: str, *, write: bool) -> bool:
        """Let `member` have `role` on the bucket unless the policy already lets it read (and,
        with `write`, write) the objects; whether a binding was added."""
        for attempt in (1, 2):
            policy = self.policy(bucket)
            if policy.allows(member, write=write):
                return False
            try:
                self._call("PUT", bucket, "/iam", f"grant {member} {role} on bucket {bucket}",
                           json=policy.granting(member, role).model_dump(mode="json", exclude_none=True))
                return True
            except StalePolicyError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable: the second attempt returns or raises")

    def bind(self, bucket: str, grants: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """Each (role, member) bound on the bucket unless it is already; the pairs added."""
        for attempt in (1, 2):
            policy, added = self.policy(bucket), []
            for role, member in grants:
                if not any(b.role == role and b.condition is None and member in b.members for b in policy.bindings):
                    policy, added = policy.granting(member, role), [*added, (role, member)]
            if not added:
                return []
            try:
                self._call("PUT", bucket, "/iam", f"grant {added} on bucket {bucket}",
                           json=policy.model_dump(mode="json", exclude_none=True))
                return added
            except StalePolicyError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable: the second attempt returns or raises")

    def unbind(self, bucket: str, grants: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """Each (role, member) bound without a condition on the bucket removed; the pairs removed."""
        for attempt in (1, 2):
            policy, removed = self.policy(bucket), []
            kept = []
            for binding in policy.bindings:
                gone = [(role, member) for role, member in grants
                        if binding.role == role and binding.condition is None and member in binding.members]
                removed += gone
                members = [m for m in binding.members if (binding.role, m) not in gone]
                if members:
                    kept.append(binding.model_copy(update={"members": members}))
            if not removed:
                return []
            try:
                self._call("PUT", bucket, "/iam", f"take back {removed} on bucket {bucket}",
                           json=policy.model_copy(update={"bindings": kept}).model_dump(mode="json", exclude_none=True))
                return removed
            except StalePolicyError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable: the second attempt returns or raises")

    def _call(self, method: str, bucket: str, tail: str, what: str, **body: Any) -> dict[str, Any]:
        url = f"{self.root}/storage/v1/b/{quote(bucket, safe='')}{tail}"
        for attempt in range(1, _TRIES + 1):
            try:
                response = self._session.request(method, url, timeout=self.timeout_s, **body)
            except requests.exceptions.RequestException as failed:
                if attempt == _TRIES:
                    raise cloud_errors.TransientError(f"{what}: cannot reach Cloud Storage at {self.root}: {failed}") \
                        from failed
            else:
                if response.status_code == 429 or response.status_code >= 500:
                    if attempt == _TRIES:
                        raise cloud_errors.TransientError(f"{what}: {_message(response)} (HTTP {response.status_code})")
                elif response.status_code == 412:
                    raise StalePolicyError(f"{what}: the policy changed meanwhile")
                elif response.status_code >= 400:
                    kind = _BY_STATUS.get(response.status_code, cloud_errors.CloudError)
                    hint = AUTH_HINT if kind is cloud_errors.AuthenticationError else None
                    raise kind(f"{what}: {_message(response)} (HTTP {response.status_code})", hint=hint)
                else:
                    return response.json() if response.content else {}
            time.sleep(self.retry_delay_s * attempt)
        raise AssertionError("unreachable: the last try returns or raises")


def _message(response: requests.Response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return response.text[:300]
