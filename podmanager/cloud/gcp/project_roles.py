"""A project's custom roles through IAM v1's `projects.roles` (REST), as `up` keeps the cluster's
own: made when missing, undeleted when deleted, and patched, with the etag of the read it came
from, when their permissions are not exactly what this podmanager's machines call; and grants of
predefined roles they replace taken back.

- A custom role's id holds letters, digits, `_` and `.`, 3 to 64 of them
  (https://docs.cloud.google.com/iam/docs/reference/rest/v1/projects.roles/create).
- A deleted role cannot be made again with its id for weeks; it can be undeleted for 7 days
  (https://docs.cloud.google.com/iam/docs/reference/rest/v1/projects.roles/delete), so a role
  found deleted (`get` answers it with `deleted: true`) is undeleted, then patched.
- A change carries the read's etag; 409 ABORTED (someone changed it meanwhile) reads it again
  (https://docs.cloud.google.com/iam/docs/policies#etag), as `ProjectIam.grant` does.
The calls go through `ProjectIam`'s session and error taxonomy (its `_call`: one client of the
project's IAM, two modules).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Iterable

from podmanager.cloud import errors as cloud_errors
from podmanager.cloud.gcp.project_iam import ProjectIam, StalePolicyError

# Every field `up` writes, named in each patch's updateMask.
_MASK = "title,description,includedPermissions,stage"


@dataclass(frozen=True)
class CustomRole:
    role_id: str
    title: str  # at most 100 bytes (the Role schema's `title`)
    description: str
    permissions: tuple[str, ...]


def role_name(project: str, role_id: str) -> str:
    return f"projects/{project}/roles/{role_id}"


def ensure_role(iam: ProjectIam, role: CustomRole) -> tuple[str, str | None]:
    """The role's name, and what this call did to it: "created", "undeleted", "updated" (its
    permissions or text changed), or None (it was as asked)."""
    name = role_name(iam.project, role.role_id)
    deadline = time.monotonic() + iam.retry_s
    while True:
        try:
            return name, _ensure_once(iam, role, name)
        except (StalePolicyError, cloud_errors.AlreadyExistsError):  # changed, or made, meanwhile: read again
            if time.monotonic() + iam.pause_s > deadline:
                raise
        time.sleep(iam.pause_s)


def _ensure_once(iam: ProjectIam, role: CustomRole, name: str) -> str | None:
    url = f"{iam.iam_root}/v1/{name}"
    fields = {"title": role.title, "description": role.description,
              "includedPermissions": sorted(role.permissions), "stage": "GA"}
    try:
        found = iam._call("GET", url, f"read custom role {name}")
    except cloud_errors.NotFoundError:
        iam._call("POST", f"{iam.iam_root}/v1/projects/{iam.project}/roles", f"create custom role {name}",
                  json={"roleId": role.role_id, "role": fields})
        return "created"
    done = None
    if found.get("deleted"):
        found = iam._call("POST", f"{url}:undelete", f"undelete custom role {name}", json={"etag": found.get("etag")})
        done = "undeleted"
    if _differs(found, fields):
        iam._call("PATCH", url, f"update custom role {name}", params={"updateMask": _MASK},
                  json={**fields, "etag": found.get("etag")})
        done = done or "updated"
    return done


def _differs(found: dict[str, Any], fields: dict[str, Any]) -> bool:
    return (sorted(found.get("includedPermissions") or []) != fields["includedPermissions"]
            or any(found.get(key, "ALPHA" if key == "stage" else "") != fields[key]
                   for key in ("title", "description", "stage")))


def take_back(iam: ProjectIam, grants: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Each (role, member) bound on the project without a condition removed; the pairs removed."""
    wanted = list(grants)
    url = f"{iam.manager_root}/v3/projects/{iam.project}"
    deadline = time.monotonic() + iam.retry_s
    while True:
        try:
            return _take_back_once(iam, url, wanted)
        except StalePolicyError:
            if time.monotonic() + iam.pause_s > deadline:
                raise
        time.sleep(iam.pause_s)


def _take_back_once(iam: ProjectIam, url: str, grants: list[tuple[str, str]]) -> list[tuple[str, str]]:
    policy = iam._call("POST", f"{url}:getIamPolicy", f"read the IAM policy of project {iam.project}",
                       json={"options": {"requestedPolicyVersion": 3}})
    removed = []
    for binding in policy.get("bindings") or []:
        for role, member in grants:
            if binding.get("role") == role and not binding.get("condition") and member in binding.get("members", []):
                binding["members"].remove(member)
                removed.append((role, member))
    if removed:
        policy["bindings"] = [b for b in policy["bindings"] if b.get("members")]
        iam._call("POST", f"{url}:setIamPolicy",
                  f"take back {', '.join(f'{role} from {member}' for role, member in removed)} on project {iam.project}",
                  json={"policy": policy})
    return removed
