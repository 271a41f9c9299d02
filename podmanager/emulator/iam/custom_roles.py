"""A simulated project's custom roles (IAM v1 `projects.roles`): what each holds, and Google's
rules for making, changing, deleting and undeleting them (`rulebook.py`, "IAM: custom roles",
each with its page). Pure: the project's record (`project.ProjectIam`) keeps them and locks.

A role is named `projects/PROJECT/roles/ID`; its etag changes with every change, and a patch or
undelete carrying another is refused 409 ABORTED (https://docs.cloud.google.com/iam/docs/policies#etag
says so of policies; the Role's `etag` is documented "to perform a consistent read-modify-write":
https://docs.cloud.google.com/iam/docs/reference/rest/v1/organizations.roles#Role). The
refusals' wording is as users report Google's [R]; their codes are the API's.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Iterable

from pydantic import BaseModel

from podmanager.emulator import rulebook
from podmanager.emulator.iam.roles import EVERYTHING

STAGES = ("ALPHA", "BETA", "GA", "DEPRECATED", "DISABLED", "EAP")  # the Role schema's enum


class CustomRole(BaseModel):
    title: str = ""
    description: str = ""
    permissions: list[str] = []
    stage: str = "ALPHA"  # the API's default when a create sets none
    deleted_at: float | None = None  # when it was deleted (seconds since the epoch); None: live
    version: int = 0  # every change counts one: the etag

    def etag(self) -> str:
        return base64.b64encode(f"pm-role-{self.version}".encode()).decode()

    def grants(self) -> frozenset[str]:
        """What a binding to it grants: nothing while it is deleted, or DISABLED (the Role
        schema: "will not contribute permissions to any principals it is granted to")."""
        return frozenset() if self.deleted_at is not None or self.stage == "DISABLED" else frozenset(self.permissions)


@dataclass
class RoleRefusal(Exception):
    """Google's refusal of a roles call: HTTP status, google.rpc code, message."""

    http: int
    status: str
    message: str


def role_name(project: str, role_id: str) -> str:
    return f"projects/{project}/roles/{role_id}"


def purge(roles: dict[str, CustomRole], now: float) -> None:
    """Roles deleted longer ago than the id's reuse delay are gone for good."""
    for role_id in [i for i, r in roles.items() if r.deleted_at is not None
                    and now - r.deleted_at >= rulebook.CUSTOM_ROLE_ID_REUSE_S]:
        del roles[role_id]


def listed(roles: dict[str, CustomRole], project: str, now: float) -> dict[str, CustomRole]:
    """Every role of the project (deleted ones too, until they are gone for good), copied."""
    purge(roles, now)
    return {role_id: role.model_copy(deep=True) for role_id, role in roles.items()}


def _check_fields(title: str, stage: str, permissions: Iterable[str]) -> list[str]:
    """The permissions, deduplicated, once the title, stage and every permission pass the rules."""
    if len(title.encode()) > rulebook.CUSTOM_ROLE_TITLE_BYTES:
        raise RoleRefusal(400, "INVALID_ARGUMENT", f"The role title is longer than "
                                                   f"{rulebook.CUSTOM_ROLE_TITLE_BYTES} bytes.")
    if stage not in STAGES:
        raise RoleRefusal(400, "INVALID_ARGUMENT", f"Invalid value at 'role.stage': {stage!r}.")
    chosen = sorted(set(permissions))
    if len(chosen) > rulebook.PERMISSIONS_PER_CUSTOM_ROLE:
        raise RoleRefusal(400, "INVALID_ARGUMENT", f"A custom role may hold at most "
                                                   f"{rulebook.PERMISSIONS_PER_CUSTOM_ROLE} permissions.")
    for permission in chosen:
        if permission not in EVERYTHING and not permission.startswith(tuple(rulebook.CUSTOM_ROLE_SUPPORT_PREFIXES)):
            raise RoleRefusal(400, "INVALID_ARGUMENT", f"Permission {permission} is not valid.")
        if rulebook.custom_role_support(permission) == "NOT_SUPPORTED":
            raise RoleRefusal(400, "INVALID_ARGUMENT",
                              f"Permission {permission} is not supported in custom roles of a project.")
    return chosen


def create(roles: dict[str, CustomRole], project: str, role_id: str, fields: dict[str, object],
           now: float) -> CustomRole:
    """A new role `role_id` made from the Role fields of the request (`fields`)."""
    purge(roles, now)
    if not rulebook.CUSTOM_ROLE_ID.fullmatch(role_id):
        raise RoleRefusal(400, "INVALID_ARGUMENT", f"The role_id ({role_id}) is invalid: it may hold letters, digits, "
                                                   "'_' and '.', 3 to 64 of them.")
    found = roles.get(role_id)
    if found is not None and found.deleted_at is not None:
        raise RoleRefusal(400, "FAILED_PRECONDITION",
                          f"You can't create a role with role_id ({role_id}) where there is an existing role with "
                          "that role_id in a deleted state. Undelete it instead.")
    if found is not None:
        raise RoleRefusal(409, "ALREADY_EXISTS", f"A role named {role_id} in projects/{project} already exists.")
    if len(roles) >= rulebook.CUSTOM_ROLES_PER_PROJECT:
        raise RoleRefusal(429, "RESOURCE_EXHAUSTED", f"projects/{project} has "
                                                     f"{rulebook.CUSTOM_ROLES_PER_PROJECT} custom roles already.")
    title, stage = str(fields.get("title") or ""), str(fields.get("stage") or "ALPHA")
    permissions = _check_fields(title, stage, _strings(fields.get("includedPermissions")))
    roles[role_id] = CustomRole(title=title, description=str(fields.get("description") or ""),
                                permissions=permissions, stage=stage)
    return roles[role_id]


def get(roles: dict[str, CustomRole], project: str, role_id: str, now: float) -> CustomRole:
    """The role, deleted or not (a deleted one says so); 404 when there is none."""
    purge(roles, now)
    found = roles.get(role_id)
    if found is None:
        raise RoleRefusal(404, "NOT_FOUND", f"The role named {role_name(project, role_id)} was not found.")
    return found


def patch(roles: dict[str, CustomRole], project: str, role_id: str, fields: dict[str, object],
          mask: list[str], now: float) -> CustomRole:
    """The fields `mask` names (all that the request sets when it names none) changed, if the
    request's etag, when it has one, is the role's."""
    role = _live(get(roles, project, role_id, now), project, role_id, "changed")
    _same_etag(role, fields.get("etag"))
    names = mask or [name for name in ("title", "description", "includedPermissions", "stage") if name in fields]
    unknown = [name for name in names if name not in ("title", "description", "includedPermissions", "stage")]
    if unknown:
        raise RoleRefusal(400, "INVALID_ARGUMENT", f"updateMask names fields a role's update cannot change: {unknown}.")
    title = str(fields.get("title") or "") if "title" in names else role.title
    stage = str(fields.get("stage") or "ALPHA") if "stage" in names else role.stage
    permissions = (_strings(fields.get("includedPermissions")) if "includedPermissions" in names
                   else role.permissions)
    role.permissions = _check_fields(title, stage, permissions)
    role.title, role.stage = title, stage
    if "description" in names:
        role.description = str(fields.get("description") or "")
    role.version += 1
    return role


def delete(roles: dict[str, CustomRole], project: str, role_id: str, etag: str | None, now: float) -> CustomRole:
    role = _live(get(roles, project, role_id, now), project, role_id, "deleted")
    _same_etag(role, etag)
    role.deleted_at = now
    role.version += 1
    return role


def undelete(roles: dict[str, CustomRole], project: str, role_id: str, etag: str | None, now: float) -> CustomRole:
    """A deleted role back as it was, within the days it may be undeleted."""
    role = get(roles, project, role_id, now)
    if role.deleted_at is None:
        raise RoleRefusal(400, "FAILED_PRECONDITION", f"The role {role_name(project, role_id)} is not deleted.")
    if now - role.deleted_at >= rulebook.CUSTOM_ROLE_UNDELETE_S:
        raise RoleRefusal(400, "FAILED_PRECONDITION", f"The role {role_name(project, role_id)} was deleted more than "
                                                      "7 days ago and cannot be undeleted.")
    _same_etag(role, etag)
    role.deleted_at = None
    role.version += 1
    return role


def _live(role: CustomRole, project: str, role_id: str, verb: str) -> CustomRole:
    if role.deleted_at is not None:
        raise RoleRefusal(400, "FAILED_PRECONDITION", f"The role {role_name(project, role_id)} is deleted and cannot "
                                                      f"be {verb}; undelete it first.")
    return role


def _same_etag(role: CustomRole, etag: object) -> None:
    if etag and etag != role.etag():
        raise RoleRefusal(409, "ABORTED", "There were concurrent policy changes. Please retry the whole "
                                          "read-modify-write with exponential backoff.")


def _strings(value: object) -> list[str]:
    return [str(item) for item in value] if isinstance(value, list) else []
