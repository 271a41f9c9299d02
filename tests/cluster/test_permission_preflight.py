"""The permission preflight: what `up` asks testIamPermissions for, and the refusal naming each
missing permission with its role and the command that grants it."""

from __future__ import annotations

import pytest

from podmanager.cluster.permission_preflight import needed_permissions, refuse_missing
from podmanager.core.errors import SpecError
from podmanager.core.spec import parse_spec


def spec(**extra):
    return parse_spec({"name": "demo", "project": "my-proj", "zones": ["us-central2-b"],
                       "slices": [{"accelerator": "v4-8"}], **extra})


def test_what_up_asks_for():
    booting = needed_permissions(spec(), vms_boot=True, makes_account=True)
    assert {"tpu.nodes.create", "tpu.nodes.delete", "compute.networks.get", "secretmanager.secrets.setIamPolicy",
            "secretmanager.versions.access", "iam.serviceAccounts.create", "iam.serviceAccounts.actAs"} <= set(booting)
    assert "compute.firewalls.create" not in booting  # a rule the network's admin made does instead
    assert not any(p.startswith("storage.") for p in booting)  # asked of each bucket
    bare = needed_permissions(spec(), vms_boot=False, makes_account=False)
    assert not any(p.startswith("secretmanager.") for p in bare) and "iam.serviceAccounts.create" not in bare
    shared = spec(network={"network": "projects/host/global/networks/vpc"})
    assert not any(p.startswith("compute.") for p in needed_permissions(shared, vms_boot=False, makes_account=False))
    remote = needed_permissions(spec(), vms_boot=True, makes_account=True, controller_vm=True)
    assert {"compute.instances.create", "compute.instances.setServiceAccount", "compute.firewalls.create",
            "resourcemanager.projects.setIamPolicy", "iam.serviceAccounts.setIamPolicy"} <= set(remote)
    assert len(remote) == len(set(remote))  # each asked once
    named = needed_permissions(spec(), vms_boot=True, makes_account=False, controller_vm=True)
    assert "resourcemanager.projects.setIamPolicy" not in named  # nothing granted on the project
    private = spec(network={"enable_external_ips": False})
    assert "compute.routers.list" in needed_permissions(private, vms_boot=False, makes_account=False)


def test_each_missing_permission_is_named_with_its_role_and_the_grant():
    with pytest.raises(SpecError) as refused:
        refuse_missing(spec(), ["secretmanager.versions.access", "secretmanager.secrets.setIamPolicy",
                                "iam.serviceAccounts.create"], "user:me@example.com")
    said = str(refused.value) + (refused.value.hint or "")
    assert refused.value.exit_code == 2 and "nothing was created" in said
    assert "secretmanager.versions.access (granted by roles/secretmanager.secretAccessor)" in said
    assert "secretmanager.secrets.setIamPolicy (granted by roles/secretmanager.admin)" in said
    assert ("gcloud projects add-iam-policy-binding my-proj --member user:me@example.com "
            "--role roles/iam.serviceAccountCreator") in said
    refuse_missing(spec(), [], "user:me@example.com")  # nothing missing: nothing said


def test_a_controller_vms_up_asks_for_the_custom_role_and_names_its_grant():
    """The controller's custom role is made, brought up to date or undeleted by the user's `up`
    (cloud/gcp/cluster_accounts.py): asked before anything bills, with Role Administrator's grant."""
    roles = ("iam.roles.create", "iam.roles.get", "iam.roles.update", "iam.roles.undelete")
    assert set(roles) <= set(needed_permissions(spec(), vms_boot=True, makes_account=True, controller_vm=True))
    named = needed_permissions(spec(), vms_boot=True, makes_account=False, controller_vm=True)
    assert not set(roles) & set(named)  # the user's account: no role made
    with pytest.raises(SpecError) as refused:
        refuse_missing(spec(), ["iam.roles.create", "iam.roles.update"], "user:me@example.com")
    said = str(refused.value) + (refused.value.hint or "")
    assert "iam.roles.create (granted by roles/iam.roleAdmin)" in said
    assert "gcloud projects add-iam-policy-binding my-proj --member user:me@example.com --role roles/iam.roleAdmin" in said
