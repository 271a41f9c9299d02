"""The cluster's own service accounts: their names, which account each machine runs as, and
what each is granted (least privilege: the TPU VMs nothing on the project, only on the secret
and buckets they read; the controller VM a custom role holding exactly the permissions of the
calls it makes on the project, and acting as the VMs' account alone)."""

from __future__ import annotations

import re

import pytest

from podmanager.cloud.gcp.cluster_accounts import (
    BUCKET_CALLS,
    BUCKET_PERMISSIONS,
    CONTROLLER,
    CONTROLLER_CALLS,
    CONTROLLER_PERMISSIONS,
    ON_BUCKETS,
    ON_RESOURCES,
    ON_TOKEN,
    ON_VMS_ACCOUNT,
    PROJECT_ROLES,
    REPLACED_ON_BUCKETS,
    REPLACED_ON_TOKEN,
    TOKEN_CALLS,
    TOKEN_PERMISSIONS,
    VMS,
    account_id,
    accounts_for,
    controller_role,
    controller_role_id,
    with_vms_account,
)
from podmanager.core.spec import parse_spec
from podmanager.emulator import rulebook
from podmanager.emulator.iam import custom_roles, methods
from podmanager.emulator.iam.gate import Gate
from podmanager.emulator.iam.project import ProjectIam, starting_point
from podmanager.emulator.iam.roles import ROLES
from podmanager.emulator.sim.cloud import SIMULATED_PROJECT_NUMBER

ACCOUNT_ID = re.compile(r"[a-z][-a-z0-9]{4,28}[a-z0-9]")  # https://docs.cloud.google.com/iam/docs/service-accounts-create


def spec(**extra):
    return parse_spec({"name": "demo", "project": "my-proj", "zones": ["us-central2-b"],
                       "slices": [{"accelerator": "v4-8"}], **extra})


def test_what_each_account_is_granted():
    assert PROJECT_ROLES == {VMS: (), CONTROLLER: ()}  # no predefined role on the project: the custom role
    assert ON_VMS_ACCOUNT == {VMS: (), CONTROLLER: ("roles/iam.serviceAccountUser",)}
    assert ON_RESOURCES[VMS] == (("roles/secretmanager.secretAccessor", "the Ray-token secret"),
                                 ("roles/storage.objectViewer", "the stage bucket"),
                                 ("roles/storage.objectUser", "the checkpoint bucket"))
    assert ON_RESOURCES[CONTROLLER] == (("roles/secretmanager.secretAccessor", "the channel-token secret"),
                                        ("podmanager.<cluster>.controller_token", "the Ray-token secret"),
                                        ("podmanager.<cluster>.controller_buckets", "each of the cluster's buckets"))


def test_no_project_role_changes_access_or_acts_as_an_account():
    # Roles that change access are granted only on the cluster's own secret and buckets.
    for role in {role for roles in (*PROJECT_ROLES.values(), *ON_VMS_ACCOUNT.values()) for role in roles}:
        assert role in ROLES, role  # the simulated project knows it, so the emulator checks it
        risky = {p for p in ROLES[role] if p.endswith(".setIamPolicy") or p == "iam.serviceAccounts.actAs"}
        # actAs only through serviceAccountUser, which is granted on the VMs' account alone
        assert risky <= ({"iam.serviceAccounts.actAs"} if role == "roles/iam.serviceAccountUser" else set()), role
    for grants in ON_RESOURCES.values():
        assert all(role in ROLES or role.startswith("podmanager.<cluster>.") for role, _ in grants)


def _granted_on_resources(account):
    """The permissions each role granted to `account` on a resource holds (a custom role's: its own)."""
    custom = {f"podmanager.<cluster>.{ON_TOKEN}": TOKEN_PERMISSIONS, f"podmanager.<cluster>.{ON_BUCKETS}": BUCKET_PERMISSIONS}
    return {role: set(custom[role]) if role in custom else set(ROLES[role]) for role, _ in ON_RESOURCES[account]}


def test_no_role_on_a_resource_lets_the_controller_change_who_may_use_it():
    # Neither the secret's nor a bucket's policy: roles/secretmanager.admin and
    # roles/storage.legacyBucketOwner (what an earlier podmanager granted) hold setIamPolicy.
    for role, permissions in _granted_on_resources(CONTROLLER).items():
        assert not {p for p in permissions if p.endswith(".setIamPolicy")}, role


@pytest.mark.parametrize(("calls", "permissions", "replaced", "beyond_the_gate"), [
    (TOKEN_CALLS, TOKEN_PERMISSIONS, REPLACED_ON_TOKEN, set()),
    (BUCKET_CALLS, BUCKET_PERMISSIONS, REPLACED_ON_BUCKETS, {"storage.objects.create"}),  # the wheel's upload
])
def test_each_resource_role_holds_exactly_what_the_controllers_calls_on_it_need(calls, permissions, replaced,
                                                                                beyond_the_gate):
    assert set(calls) <= set(methods.METHODS), set(calls) - set(methods.METHODS)
    needed = {p for call in calls for p in methods.METHODS[call].permissions} | beyond_the_gate
    assert sorted(permissions) == sorted(needed) and len(set(permissions)) == len(permissions)
    # Narrower than the predefined roles it replaces, and usable in a project's custom role.
    assert set(permissions) < set().union(*(ROLES[role] for role in replaced))
    assert all(rulebook.custom_role_support(p) == "SUPPORTED" for p in permissions)


def _controller_with_resource_role(part, permissions, resource):
    """A project whose controller account holds, in `resource`'s own policy alone, a custom role of
    the project holding `permissions` (the project's policy grants it nothing)."""
    number = SIMULATED_PROJECT_NUMBER
    iam = ProjectIam(number, starting_point("new", number), project="my-proj")
    for service in (methods.SECRET_MANAGER, methods.STORAGE):
        iam.enable(service)
    iam.roles_call(custom_roles.create, controller_role_id("demo", part),
                   {"title": "t", "includedPermissions": sorted(permissions)})
    controller = f"serviceAccount:{accounts_for(spec()).controller}"
    bound = [(controller_role("my-proj", "demo", part), [controller])]
    return Gate(iam, lambda name: bound if name == resource else []), controller


SECRET = "projects/my-proj/secrets/podmanager-demo-ray-token"
BUCKET = "projects/_/buckets/demo-stage"
ON_EACH = [(ON_TOKEN, TOKEN_CALLS, TOKEN_PERMISSIONS, SECRET), (ON_BUCKETS, BUCKET_CALLS, BUCKET_PERMISSIONS, BUCKET)]


@pytest.mark.parametrize(("part", "calls", "permissions", "resource"), ON_EACH)
def test_with_its_role_on_the_resource_every_controller_call_on_it_passes(part, calls, permissions, resource):
    gate, controller = _controller_with_resource_role(part, permissions, resource)
    for call in calls:
        assert gate.check(call, controller, resource) is None, call
        # Granted on that resource only: another secret or bucket of the project is refused.
        assert gate.check(call, controller, resource + "-other") is not None, call


@pytest.mark.parametrize(("part", "calls", "left_out", "resource"), [
    (part, calls, left_out, resource) for part, calls, permissions, resource in ON_EACH
    for left_out in permissions if left_out != "storage.objects.create"])
def test_one_permission_fewer_in_a_resource_role_is_a_403_naming_it(part, calls, left_out, resource):
    permissions = dict((p, ps) for p, _c, ps, _r in ON_EACH)[part]
    gate, controller = _controller_with_resource_role(part, set(permissions) - {left_out}, resource)
    needing = [call for call in calls if left_out in methods.METHODS[call].permissions]
    assert needing
    for call in needing:
        denial = gate.check(call, controller, resource)
        assert denial is not None and denial.http == 403 and f"'{left_out}'" in denial.message, call


def test_the_controllers_role_holds_exactly_what_its_calls_need_by_the_emulators_method_table():
    assert set(CONTROLLER_CALLS) <= set(methods.METHODS), set(CONTROLLER_CALLS) - set(methods.METHODS)
    needed = {p for call in CONTROLLER_CALLS for p in methods.METHODS[call].permissions}
    assert sorted(CONTROLLER_PERMISSIONS) == sorted(needed)  # every call covered, and nothing else
    assert len(set(CONTROLLER_PERMISSIONS)) == len(CONTROLLER_PERMISSIONS)
    # Narrower than the predefined roles it replaces (it cannot reimage a node or change an SSL policy).
    assert set(CONTROLLER_PERMISSIONS) < ROLES["roles/tpu.admin"] | ROLES["roles/compute.securityAdmin"]
    # Google may hold it in a project's custom role: every permission known and supported.
    assert all(rulebook.custom_role_support(p) == "SUPPORTED" for p in CONTROLLER_PERMISSIONS)
    role = custom_roles.create({}, "my-proj", controller_role_id("demo"),
                               {"title": "t", "includedPermissions": list(CONTROLLER_PERMISSIONS)}, 0.0)
    assert sorted(role.permissions) == sorted(CONTROLLER_PERMISSIONS)


def _controller_with_role(permissions):
    """A project whose controller account holds a custom role of `permissions` alone."""
    number = SIMULATED_PROJECT_NUMBER
    iam = ProjectIam(number, starting_point("new", number), project="my-proj")
    for service in {methods.METHODS[call].service for call in CONTROLLER_CALLS}:
        iam.enable(service)
    iam.roles_call(custom_roles.create, controller_role_id("demo"),
                   {"title": "t", "includedPermissions": sorted(permissions)})
    controller = f"serviceAccount:{accounts_for(spec()).controller}"
    iam.create_account(controller.split(":")[1], "ctl")
    iam.grant(f"projects/my-proj/roles/{controller_role_id('demo')}", controller)
    return Gate(iam), controller


def test_with_the_role_every_controller_call_passes_the_emulators_gate():
    gate, controller = _controller_with_role(CONTROLLER_PERMISSIONS)
    for call in CONTROLLER_CALLS:
        assert gate.check(call, controller, "projects/my-proj") is None, call


@pytest.mark.parametrize("left_out", CONTROLLER_PERMISSIONS)
def test_one_permission_fewer_is_a_403_naming_it(left_out):
    gate, controller = _controller_with_role(set(CONTROLLER_PERMISSIONS) - {left_out})
    needing = [call for call in CONTROLLER_CALLS if left_out in methods.METHODS[call].permissions]
    assert needing  # some call of the controller's needs it
    for call in needing:
        denial = gate.check(call, controller, "projects/my-proj")
        assert denial is not None and denial.http == 403 and f"'{left_out}'" in denial.message, call


def test_account_ids_fit_googles_rule_and_keep_long_cluster_names_apart():
    assert account_id("demo", VMS) == "pm-demo-vms"
    long_a, long_b = "a" * 26 + "-one", "a" * 26 + "-two"
    for name in ("demo", "x", long_a, "b" * 30):
        for role in (VMS, CONTROLLER):
            assert ACCOUNT_ID.fullmatch(account_id(name, role)), account_id(name, role)
    assert account_id(long_a, VMS) != account_id(long_b, VMS)


def test_the_controllers_role_id_fits_googles_rule_for_every_cluster_name():
    assert controller_role_id("demo") == "podmanager.demo.controller"
    for name in ("x", "a-b-c", "a" * 30):
        for part in ("controller", ON_TOKEN, ON_BUCKETS):
            assert rulebook.CUSTOM_ROLE_ID.fullmatch(controller_role_id(name, part)), (name, part)
    assert controller_role("my-proj", "a-b", ON_TOKEN) == "projects/my-proj/roles/podmanager.a_b.controller_token"
    assert controller_role_id("a-b") != controller_role_id("ab")


def test_the_cluster_s_own_accounts_unless_the_spec_names_one():
    own = accounts_for(spec())
    assert own.own and own.to_make and own.check_caller and own.vms == "pm-demo-vms@my-proj.iam.gserviceaccount.com"
    assert own.controller == "pm-demo-ctl@my-proj.iam.gserviceaccount.com"
    filled = accounts_for(with_vms_account(spec(), own.vms))  # named by the `up` that made it: still ours
    assert filled.own and not filled.to_make and (filled.vms, filled.controller) == (own.vms, own.controller)
    assert not filled.check_caller  # the `up` that named it (the user's machine's) asked already
    named = accounts_for(spec(network={"service_account": "mine@my-proj.iam.gserviceaccount.com"}))
    assert not named.own and not named.to_make and named.check_caller
    assert named.vms == named.controller == "mine@my-proj.iam.gserviceaccount.com"


def test_filling_the_vms_account_in_keeps_the_rest_of_the_network():
    filled = with_vms_account(spec(network={"tags": ["ray"], "enable_external_ips": False}), "a@b.iam.gserviceaccount.com")
    assert filled.network.service_account == "a@b.iam.gserviceaccount.com"
    assert filled.network.tags == ["ray"] and not filled.network.enable_external_ips
