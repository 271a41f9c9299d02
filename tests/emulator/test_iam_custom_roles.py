"""A simulated project's custom roles (issue 45): IAM v1 `projects.roles` served by the emulator
(through its IAM gate and its schema gate), Google's rules for them (the rulebook's "IAM: custom
roles", each with its page), and a binding to one granting what it holds, as a predefined
role's does; podmanager's client (`cloud/gcp/project_roles.py`) keeps one as asked."""

from __future__ import annotations

import pytest
import requests
from served_emulator import served_emulator

from podmanager.cloud.gcp.permissions import MissingPermissionError
from podmanager.cloud.gcp.project_iam import ProjectIam
from podmanager.cloud.gcp.project_roles import CustomRole, ensure_role, take_back
from podmanager.emulator import rulebook
from podmanager.emulator.iam import custom_roles, tokens
from podmanager.emulator.iam.custom_roles import RoleRefusal
from podmanager.emulator.iam.gate import Gate
from podmanager.emulator.iam.project import ProjectIam as SimulatedIam
from podmanager.emulator.iam.project import starting_point
from podmanager.emulator.sim.cloud import SIMULATED_PROJECT_NUMBER

PROJECT = "p-roles"
NUMBER = SIMULATED_PROJECT_NUMBER
DAY = 86400.0
OPS = "user:ops@example.com"
TPU_ROLE = {"title": "t", "includedPermissions": ["tpu.nodes.list"], "stage": "GA"}


def make(roles, role_id="podmanager.c.controller", fields=None, now=0.0):
    return custom_roles.create(roles, PROJECT, role_id, fields or TPU_ROLE, now)


def refusal(call, *args) -> RoleRefusal:
    with pytest.raises(RoleRefusal) as refused:
        call(*args)
    return refused.value


# ---------------------------------------------------------------------- the rules


@pytest.mark.parametrize("role_id", ["ab", "a" * 65, "pm-c-ctl", "roles/x", "x y"])
def test_a_role_id_is_3_to_64_letters_digits_underscores_and_periods(role_id):
    found = refusal(make, {}, role_id)
    assert (found.http, found.status) == (400, "INVALID_ARGUMENT") and role_id in found.message


def test_a_good_role_id_and_its_fields_are_kept():
    roles = {}
    role = make(roles, "Pm_c.Controller9", {"title": "t", "description": "d", "stage": "GA",
                                          "includedPermissions": ["tpu.nodes.list", "tpu.nodes.get", "tpu.nodes.list"]})
    assert role.permissions == ["tpu.nodes.get", "tpu.nodes.list"] and (role.title, role.stage) == ("t", "GA")
    assert make({}, "a" * 64).stage == "GA"


def test_a_title_over_100_bytes_a_permission_google_does_not_know_and_an_organizations_are_refused():
    assert "100 bytes" in refusal(make, {}, "r.one", {"title": "é" * 51}).message
    assert refusal(make, {}, "r.one", {"includedPermissions": ["tpu.nodes.fly"]}).message == \
        "Permission tpu.nodes.fly is not valid."
    found = refusal(make, {}, "r.one", {"includedPermissions": ["resourcemanager.organizations.get"]})
    assert found.http == 400 and "not supported in custom roles" in found.message
    assert rulebook.custom_role_support("tpu.nodes.create") == "SUPPORTED"


def test_a_project_holds_300_custom_roles_and_a_role_3000_permissions(monkeypatch):
    monkeypatch.setattr(rulebook, "CUSTOM_ROLES_PER_PROJECT", 2)
    roles = {}
    make(roles, "r.one")
    make(roles, "r.two")
    assert refusal(make, roles, "r.three").status == "RESOURCE_EXHAUSTED"
    monkeypatch.setattr(rulebook, "PERMISSIONS_PER_CUSTOM_ROLE", 1)
    assert "at most 1 permissions" in refusal(
        make, {}, "r.one", {"includedPermissions": ["tpu.nodes.get", "tpu.nodes.list"]}).message


def test_a_role_made_twice_is_409_and_a_deleted_ones_id_is_refused_until_it_is_gone_for_good():
    roles = {}
    make(roles)
    assert (refusal(make, roles).http, refusal(make, roles).status) == (409, "ALREADY_EXISTS")
    custom_roles.delete(roles, PROJECT, "podmanager.c.controller", None, 1.0)
    again = refusal(make, roles, "podmanager.c.controller", None, 2.0)
    assert (again.http, again.status) == (400, "FAILED_PRECONDITION") and "Undelete it" in again.message
    assert custom_roles.get(roles, PROJECT, "podmanager.c.controller", 2.0).deleted_at == 1.0  # read, deleted
    assert refusal(make, roles, "podmanager.c.controller", None, 1.0 + 36 * DAY).status == "FAILED_PRECONDITION"
    assert make(roles, now=1.0 + 37 * DAY).deleted_at is None  # 37 days on: the id is free again


def test_a_deleted_role_is_undeleted_within_7_days_and_not_after():
    roles = {}
    make(roles)
    custom_roles.delete(roles, PROJECT, "podmanager.c.controller", None, 0.0)
    assert custom_roles.undelete(roles, PROJECT, "podmanager.c.controller", None, 6 * DAY).deleted_at is None
    custom_roles.delete(roles, PROJECT, "podmanager.c.controller", None, 10 * DAY)
    late = refusal(custom_roles.undelete, roles, PROJECT, "podmanager.c.controller", None, 17 * DAY)
    assert late.status == "FAILED_PRECONDITION" and "7 days" in late.message
    assert refusal(custom_roles.patch, roles, PROJECT, "podmanager.c.controller", {"title": "x"}, [],
                   11 * DAY).status == "FAILED_PRECONDITION"  # deleted: undelete it first


def test_a_patch_changes_the_masks_fields_with_the_roles_etag_and_refuses_another():
    roles = {}
    role = make(roles)
    etag = role.etag()
    changed = custom_roles.patch(roles, PROJECT, "podmanager.c.controller",
                                 {"includedPermissions": ["tpu.nodes.get"], "title": "new", "etag": etag},
                                 ["includedPermissions"], 0.0)
    assert changed.permissions == ["tpu.nodes.get"] and changed.title == "t"  # the title was not in the mask
    stale = refusal(custom_roles.patch, roles, PROJECT, "podmanager.c.controller",
                    {"title": "x", "etag": etag}, ["title"], 0.0)
    assert (stale.http, stale.status) == (409, "ABORTED")
    assert refusal(custom_roles.patch, roles, PROJECT, "nobody", {}, [], 0.0).http == 404


# ---------------------------------------------------------------------- a binding to one


def test_a_custom_role_grants_what_it_holds_until_it_is_deleted_and_another_projects_grants_nothing():
    clock = [0.0]
    iam = SimulatedIam(NUMBER, starting_point("new", NUMBER), project=PROJECT, clock=lambda: clock[0])
    iam.enable("tpu.googleapis.com")
    gate = Gate(iam)
    iam.roles_call(custom_roles.create, "r.tpu", TPU_ROLE)
    name = f"projects/{PROJECT}/roles/r.tpu"
    iam.grant(name, OPS)
    assert gate.check("tpu.projects.locations.nodes.list", OPS, f"projects/{PROJECT}/locations/z") is None
    denied = gate.check("tpu.projects.locations.nodes.create", OPS, f"projects/{PROJECT}/locations/z")
    assert denied is not None and denied.http == 403 and "'tpu.nodes.create'" in denied.message
    iam.roles_call(custom_roles.delete, "r.tpu", None)
    assert gate.check("tpu.projects.locations.nodes.list", OPS, f"projects/{PROJECT}/locations/z") is not None
    assert iam.bindable(name) == f"Role ({name}) is deleted: a binding may not name it."
    assert iam.bindable("projects/other/roles/r.tpu") is not None
    iam.roles_call(custom_roles.undelete, "r.tpu", None)
    assert gate.check("tpu.projects.locations.nodes.list", OPS, f"projects/{PROJECT}/locations/z") is None


# ---------------------------------------------------------------------- served


@pytest.fixture
def emulator():
    with served_emulator(PROJECT) as served:
        yield served


def client(emulator, caller=tokens.USER) -> ProjectIam:
    iam = ProjectIam(PROJECT, endpoint=f"http://127.0.0.1:{emulator.rest_port}", caller=caller, pause_s=0.01)
    iam._session.headers["Authorization"] = f"Bearer {tokens.issue(caller)}"
    return iam


def test_podmanagers_client_makes_keeps_updates_and_undeletes_a_role_through_both_gates(emulator):
    asked = CustomRole("podmanager.c.controller", "c: controller", "what it calls", ("tpu.nodes.list",))
    name = f"projects/{PROJECT}/roles/podmanager.c.controller"
    with client(emulator) as iam:
        assert ensure_role(iam, asked) == (name, "created")
        assert ensure_role(iam, asked) == (name, None)  # as asked: nothing written
        wider = CustomRole(asked.role_id, asked.title, asked.description, ("tpu.nodes.list", "tpu.nodes.get"))
        assert ensure_role(iam, wider) == (name, "updated")
        emulator.iam.roles_call(custom_roles.delete, asked.role_id, None)
        assert ensure_role(iam, asked) == (name, "undeleted")
        assert iam.grant([(name, OPS)]) == [(name, OPS)]
    role = emulator.iam.policy().custom_roles[asked.role_id]
    assert role.permissions == ["tpu.nodes.list"] and role.stage == "GA" and role.deleted_at is None
    called = [c["method"] for c in emulator.gate.calls_made() if c["method"].startswith("iam.projects.roles.")]
    assert called == ["iam.projects.roles.get", "iam.projects.roles.create", "iam.projects.roles.get",
                      "iam.projects.roles.get", "iam.projects.roles.patch", "iam.projects.roles.get",
                      "iam.projects.roles.undelete", "iam.projects.roles.patch"]


def test_a_role_changed_between_its_read_and_its_patch_is_read_again(emulator):
    asked = CustomRole("r.one", "t", "d", ("tpu.nodes.get",))
    emulator.iam.roles_call(custom_roles.create, "r.one", TPU_ROLE)
    changed = []

    def someone_else_patches(response, *args, **kwargs):  # after this `up`'s read, before its patch
        if response.request.method == "GET" and "/roles/" in response.url and not changed:
            changed.append(True)
            emulator.iam.roles_call(custom_roles.patch, "r.one", {"title": "theirs"}, ["title"])

    with client(emulator) as iam:
        iam._session.hooks["response"].append(someone_else_patches)
        assert ensure_role(iam, asked) == (f"projects/{PROJECT}/roles/r.one", "updated")
    role = emulator.iam.policy().custom_roles["r.one"]
    assert (role.title, role.permissions) == ("t", ["tpu.nodes.get"])
    patches = emulator.gate.calls_made(["iam.projects.roles.patch"])
    assert len(patches) == 2  # the first refused 409 ABORTED (a stale etag), the one after reading again


def test_predefined_roles_are_taken_back_from_one_member_alone(emulator):
    emulator.iam.grant("roles/tpu.admin", OPS)
    emulator.iam.grant("roles/tpu.admin", "user:other@example.com")
    with client(emulator) as iam:
        assert take_back(iam, [("roles/tpu.admin", OPS), ("roles/compute.securityAdmin", OPS)]) == [
            ("roles/tpu.admin", OPS)]
        assert take_back(iam, [("roles/tpu.admin", OPS)]) == []
    assert emulator.iam.policy().bindings["roles/tpu.admin"] == ["user:other@example.com"]


def test_each_roles_method_needs_its_permission_and_an_editor_may_not_make_roles(emulator):
    editor = "user:editor@example.com"
    emulator.iam.grant("roles/editor", editor)
    with client(emulator, editor) as iam, pytest.raises(MissingPermissionError) as denied:
        ensure_role(iam, CustomRole("r.one", "t", "d", ("tpu.nodes.list",)))
    assert "iam.roles.create" in str(denied.value) and "roles/iam.roleAdmin" in (denied.value.hint or "")
    rest = f"http://127.0.0.1:{emulator.rest_port}/v1/projects/{PROJECT}/roles"
    stranger = {"Authorization": f"Bearer {tokens.issue('user:stranger@example.com')}"}
    for verb, path, permission in (("GET", "", "iam.roles.list"), ("GET", "/r.one", "iam.roles.get"),
                                   ("PATCH", "/r.one", "iam.roles.update"), ("DELETE", "/r.one", "iam.roles.delete"),
                                   ("POST", "/r.one:undelete", "iam.roles.undelete")):
        refused = requests.request(verb, rest + path, json={}, headers=stranger, timeout=10)
        assert refused.status_code == 403 and f"'{permission}'" in refused.json()["error"]["message"]


def test_a_roles_request_is_checked_against_iams_discovery_document(emulator):
    user = {"Authorization": f"Bearer {tokens.issue(tokens.USER)}"}
    rest = f"http://127.0.0.1:{emulator.rest_port}/v1/projects/{PROJECT}/roles"
    unknown = requests.post(rest, json={"roleId": "r.one", "role": {"permissions": ["tpu.nodes.list"]}},
                            headers=user, timeout=10)
    assert unknown.status_code == 400 and 'Unknown name "permissions"' in unknown.json()["error"]["message"]
    made = requests.post(rest, json={"roleId": "r.one", "role": TPU_ROLE}, headers=user, timeout=10)
    assert made.status_code == 200 and made.json()["name"] == f"projects/{PROJECT}/roles/r.one"
    listed = requests.get(rest, headers=user, timeout=10).json()
    assert [r["name"] for r in listed["roles"]] == [f"projects/{PROJECT}/roles/r.one"]
    assert requests.delete(f"{rest}/r.one", headers=user, timeout=10).json()["deleted"] is True
    assert requests.get(rest, headers=user, timeout=10).json() == {}
    assert len(requests.get(f"{rest}?showDeleted=true", headers=user, timeout=10).json()["roles"]) == 1
