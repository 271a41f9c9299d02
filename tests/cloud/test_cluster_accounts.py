"""The cluster's own service accounts: their names, which account each machine runs as, and
what each is granted (least privilege: the TPU VMs nothing on the project, only on the secret
and buckets they read; the controller VM Cloud TPU, the firewall rule and acting as the VMs'
account alone)."""

from __future__ import annotations

import re

from podmanager.cloud.gcp.cluster_accounts import (
    CONTROLLER,
    ON_RESOURCES,
    ON_VMS_ACCOUNT,
    PROJECT_ROLES,
    VMS,
    account_id,
    accounts_for,
    with_vms_account,
)
from podmanager.core.spec import parse_spec
from podmanager.emulator.iam.roles import ROLES

ACCOUNT_ID = re.compile(r"[a-z][-a-z0-9]{4,28}[a-z0-9]")  # https://docs.cloud.google.com/iam/docs/service-accounts-create


def spec(**extra):
    return parse_spec({"name": "demo", "project": "my-proj", "zones": ["us-central2-b"],
                       "slices": [{"accelerator": "v4-8"}], **extra})


def test_what_each_account_is_granted():
    assert PROJECT_ROLES == {VMS: (), CONTROLLER: ("roles/tpu.admin", "roles/compute.securityAdmin")}
    assert ON_VMS_ACCOUNT == {VMS: (), CONTROLLER: ("roles/iam.serviceAccountUser",)}
    assert ON_RESOURCES[VMS] == (("roles/secretmanager.secretAccessor", "the Ray-token secret"),
                                 ("roles/storage.objectViewer", "the stage bucket"),
                                 ("roles/storage.objectUser", "the checkpoint bucket"))
    assert ON_RESOURCES[CONTROLLER] == (("roles/secretmanager.secretAccessor", "the channel-token secret"),
                                        ("roles/secretmanager.admin", "the Ray-token secret"),
                                        ("roles/storage.legacyBucketOwner", "each of the cluster's buckets"),
                                        ("roles/storage.objectViewer", "each of the cluster's buckets"))


def test_no_project_role_changes_access_or_acts_as_an_account():
    # Roles that change access are granted only on the cluster's own secret and buckets.
    for role in {role for roles in (*PROJECT_ROLES.values(), *ON_VMS_ACCOUNT.values()) for role in roles}:
        assert role in ROLES, role  # the simulated project knows it, so the emulator checks it
        risky = {p for p in ROLES[role] if p.endswith(".setIamPolicy") or p == "iam.serviceAccounts.actAs"}
        # actAs only through serviceAccountUser, which is granted on the VMs' account alone
        assert risky <= ({"iam.serviceAccounts.actAs"} if role == "roles/iam.serviceAccountUser" else set()), role
    for grants in ON_RESOURCES.values():
        assert all(role in ROLES for role, _ in grants)
    assert "tpu.nodes.create" in ROLES["roles/tpu.admin"]
    assert {"compute.firewalls.create", "compute.firewalls.delete"} <= ROLES["roles/compute.securityAdmin"]
    assert "storage.buckets.getIamPolicy" in ROLES["roles/storage.legacyBucketOwner"]


def test_account_ids_fit_googles_rule_and_keep_long_cluster_names_apart():
    assert account_id("demo", VMS) == "pm-demo-vms"
    long_a, long_b = "a" * 26 + "-one", "a" * 26 + "-two"
    for name in ("demo", "x", long_a, "b" * 30):
        for role in (VMS, CONTROLLER):
            assert ACCOUNT_ID.fullmatch(account_id(name, role)), account_id(name, role)
    assert account_id(long_a, VMS) != account_id(long_b, VMS)


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
