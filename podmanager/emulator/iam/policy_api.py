"""The project's IAM policy and its service accounts over REST, on the emulator's REST port (a
part of `api.IamApi`; the gate has checked the caller's permission first).

- Resource Manager v3 `POST /v3/projects/P:getIamPolicy` and `:setIamPolicy`
  (https://docs.cloud.google.com/resource-manager/reference/rest/v3/projects/setIamPolicy): the
  policy written whole with the etag of the read it came from; another etag is 409 ABORTED
  ("If the etag values do not match, the request fails with a 409 error code and ABORTED
  status": https://docs.cloud.google.com/iam/docs/policies#etag). A member naming a service
  account the project lacks is 400 "Service account EMAIL does not exist." [R], a role the
  simulated project does not know 400 (Google: unknown to the resource's hierarchy [R]).
  Conditional bindings are not kept here: refused (the stricter answer).
- IAM v1 `POST /v1/projects/P/serviceAccounts` (create: 409 ALREADY_EXISTS when it exists),
  `GET .../serviceAccounts/EMAIL` (404 when it does not), and the account's own policy
  `:getIamPolicy` / `:setIamPolicy` (who may act as it)
  (https://docs.cloud.google.com/iam/docs/reference/rest/v1/projects.serviceAccounts). An
  account id is 6-30 lowercase letters, digits and hyphens, a letter first
  (https://docs.cloud.google.com/iam/docs/service-accounts-create#creating).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from typing import Any
from urllib.parse import unquote, urlsplit

from podmanager.emulator import rest
from podmanager.emulator.iam.project import NoSuchAccount, ProjectIam, StalePolicy

_PROJECT_POLICY = re.compile(r"^/v3/projects/(?P<project>[^/:]+):(?P<verb>getIamPolicy|setIamPolicy)$")
_ACCOUNTS = re.compile(r"^/v1/projects/(?P<project>[^/]+)/serviceAccounts"
                       r"(?:/(?P<email>[^/:]+)(?::(?P<verb>getIamPolicy|setIamPolicy))?)?$")
_ACCOUNT_ID = re.compile(r"^[a-z](?:[-a-z0-9]{4,28}[a-z0-9])$")


def answer(iam: ProjectIam, request: rest.Request) -> rest.Answer | None:
    """The answer to a policy or service-account request; None: not one of them."""
    path = unquote(urlsplit(request.path).path)
    if request.method == "POST" and (found := _PROJECT_POLICY.match(path)) is not None:
        if found["verb"] == "getIamPolicy":
            return rest.json_answer(200, _policy_json(iam.policy().bindings, iam.etag()))
        return _set_project_policy(iam, request.json_object())
    if (found := _ACCOUNTS.match(path)) is None:
        return None
    project, email, verb = found["project"], found["email"], found["verb"]
    if email is None:
        return _create_account(iam, project, request.json_object()) if request.method == "POST" else None
    if not iam.account_exists(email):
        return rest.error_answer(404, "NOT_FOUND", f"Unknown service account {email}.")
    if verb is None and request.method == "GET":
        return rest.json_answer(200, _account_json(project, email, iam.policy().accounts.get(email, "")))
    if verb == "getIamPolicy" and request.method == "POST":
        bindings = iam.account_policy(email)
        return rest.json_answer(200, _policy_json(bindings, _content_etag(bindings)))
    if verb == "setIamPolicy" and request.method == "POST":
        return _set_account_policy(iam, email, request.json_object())
    return None


def _policy_json(bindings: dict[str, list[str]], etag: str) -> dict[str, Any]:
    return {"version": 1, "etag": etag,
            "bindings": [{"role": role, "members": sorted(members)} for role, members in sorted(bindings.items())]}


def _content_etag(bindings: dict[str, list[str]]) -> str:
    text = json.dumps({role: sorted(members) for role, members in bindings.items()}, sort_keys=True)
    return base64.b64encode(hashlib.sha256(text.encode()).digest()[:9]).decode()


def _bindings(iam: ProjectIam, policy: dict[str, Any]) -> dict[str, list[str]] | rest.Answer:
    """The policy's bindings as role -> members, or the 400 Google answers (a role unknown, or a
    deleted custom role: `ProjectIam.bindable`)."""
    bindings: dict[str, list[str]] = {}
    for binding in policy.get("bindings") or []:
        role = binding.get("role", "")
        if binding.get("condition"):
            return rest.error_answer(400, "INVALID_ARGUMENT", "the simulated project keeps no conditional bindings")
        refused = iam.bindable(role)
        if refused is not None:
            return rest.error_answer(400, "INVALID_ARGUMENT", refused)
        bindings.setdefault(role, []).extend(m for m in binding.get("members") or [] if m not in bindings[role])
    return bindings


def _set_project_policy(iam: ProjectIam, body: dict[str, Any]) -> rest.Answer:
    policy = body.get("policy") or {}
    bindings = _bindings(iam, policy)
    if isinstance(bindings, rest.Answer):
        return bindings
    try:
        iam.set_bindings(bindings, policy.get("etag"))
    except StalePolicy:
        return rest.error_answer(409, "ABORTED", "There were concurrent policy changes. Please retry the whole "
                                                 "read-modify-write with exponential backoff.")
    except NoSuchAccount as missing:
        return rest.error_answer(400, "INVALID_ARGUMENT", f"Service account {missing.email} does not exist.")
    return rest.json_answer(200, _policy_json(iam.policy().bindings, iam.etag()))


def _set_account_policy(iam: ProjectIam, email: str, body: dict[str, Any]) -> rest.Answer:
    policy = body.get("policy") or {}
    bindings = _bindings(iam, policy)
    if isinstance(bindings, rest.Answer):
        return bindings
    current = iam.account_policy(email)
    if policy.get("etag") and policy["etag"] != _content_etag(current):
        return rest.error_answer(409, "ABORTED", "There were concurrent policy changes. Please retry the whole "
                                                 "read-modify-write with exponential backoff.")
    try:
        iam.set_account_policy(email, bindings)
    except NoSuchAccount as missing:
        return rest.error_answer(400, "INVALID_ARGUMENT", f"Service account {missing.email} does not exist.")
    return rest.json_answer(200, _policy_json(bindings, _content_etag(bindings)))


def _create_account(iam: ProjectIam, project: str, body: dict[str, Any]) -> rest.Answer:
    account_id = str(body.get("accountId", ""))
    if not _ACCOUNT_ID.fullmatch(account_id):
        return rest.error_answer(400, "INVALID_ARGUMENT",
                                 f"Invalid account id {account_id!r}: 6-30 lowercase letters, digits and hyphens, "
                                 "starting with a letter and not ending with a hyphen.")
    email = f"{account_id}@{project}.iam.gserviceaccount.com"
    display = str((body.get("serviceAccount") or {}).get("displayName", ""))
    if not iam.create_account(email, display):
        return rest.error_answer(409, "ALREADY_EXISTS",
                                 f"Service account {account_id} already exists within project projects/{project}.")
    return rest.json_answer(200, _account_json(project, email, display))


def _account_json(project: str, email: str, display: str) -> dict[str, Any]:
    unique = str(int(hashlib.sha256(email.encode()).hexdigest()[:15], 16))  # stable, numeric, as Google's
    return {"name": f"projects/{project}/serviceAccounts/{email}", "projectId": project, "uniqueId": unique,
            "email": email, "displayName": display, "oauth2ClientId": unique,
            "etag": base64.b64encode(b"pm-account").decode()}
