"""A project's custom roles over REST, on the emulator's REST port (a part of `api.IamApi`; the
gate has checked the caller's permission first and the schema gate the request):
IAM v1 `projects.roles` (https://docs.cloud.google.com/iam/docs/reference/rest/v1/projects.roles):

- `POST /v1/projects/P/roles` {"roleId", "role"}: create (`iam.roles.create`);
- `GET /v1/projects/P/roles[?showDeleted=true]`: list (`iam.roles.list`; deleted ones only when asked);
- `GET /v1/projects/P/roles/ID`: get (`iam.roles.get`; a deleted role too, saying `deleted`);
- `PATCH /v1/projects/P/roles/ID?updateMask=...`: patch (`iam.roles.update`), with the role's etag;
- `DELETE /v1/projects/P/roles/ID[?etag=...]`: delete (`iam.roles.delete`);
- `POST /v1/projects/P/roles/ID:undelete` {"etag"}: undelete (`iam.roles.undelete`).

The rules each follows are `custom_roles.py`'s.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from podmanager.emulator import rest
from podmanager.emulator.iam import custom_roles
from podmanager.emulator.iam.custom_roles import CustomRole, RoleRefusal
from podmanager.emulator.iam.project import ProjectIam

_ROLES = re.compile(r"^/v1/projects/(?P<project>[^/]+)/roles(?:/(?P<role>[^/:]+)(?P<undelete>:undelete)?)?$")


def answer(iam: ProjectIam, request: rest.Request) -> rest.Answer | None:
    """The answer to a custom-role request; None: not one of them."""
    url = urlsplit(request.path)
    found = _ROLES.match(unquote(url.path))
    if found is None:
        return None
    project, role_id = found["project"], found["role"]
    query = {name: values[-1] for name, values in parse_qs(url.query).items()}
    if project != iam.project:
        return rest.error_answer(404, "NOT_FOUND", f"The project {project} is not the simulated project's.")
    try:
        if role_id is None:
            if request.method == "POST":
                body = request.json_object()
                role_id = str(body.get("roleId", ""))
                role = iam.roles_call(custom_roles.create, role_id, body.get("role") or {})
                return _role(project, role_id, role)
            if request.method == "GET":
                return _list(iam, project, query.get("showDeleted") == "true")
            return None
        if found["undelete"]:
            if request.method != "POST":
                return None
            return _role(project, role_id, iam.roles_call(custom_roles.undelete, role_id, request.json_object().get("etag")))
        if request.method == "GET":
            return _role(project, role_id, iam.roles_call(custom_roles.get, role_id))
        if request.method == "PATCH":
            mask = [name for name in query.get("updateMask", "").split(",") if name]
            return _role(project, role_id, iam.roles_call(custom_roles.patch, role_id, request.json_object(), mask))
        if request.method == "DELETE":
            return _role(project, role_id, iam.roles_call(custom_roles.delete, role_id, query.get("etag")))
    except RoleRefusal as refused:
        return rest.error_answer(refused.http, refused.status, refused.message)
    return None


def role_json(project: str, role_id: str, role: CustomRole) -> dict[str, Any]:
    """The Role resource as the API answers it; `deleted` only when it is."""
    shown: dict[str, Any] = {"name": custom_roles.role_name(project, role_id), "title": role.title,
                             "description": role.description, "includedPermissions": list(role.permissions),
                             "etag": role.etag()}
    if role.stage != "ALPHA":  # the schema: an ALPHA role's definition leaves `stage` out
        shown["stage"] = role.stage
    if role.deleted_at is not None:
        shown["deleted"] = True
    return shown


def _role(project: str, role_id: str, role: CustomRole) -> rest.Answer:
    return rest.json_answer(200, role_json(project, role_id, role))


def _list(iam: ProjectIam, project: str, show_deleted: bool) -> rest.Answer:
    with_deleted = iam.roles_call(custom_roles.listed)
    shown = [role_json(project, role_id, role) for role_id, role in sorted(with_deleted.items())
             if show_deleted or role.deleted_at is None]
    return rest.json_answer(200, {"roles": shown} if shown else {})
