"""What the user's `up` grants the cluster's controller VM account before the VM exists
(`cluster/controller_preflight.py`, `client/controller_machine.py`), against a served emulator:
the cluster's custom roles made and granted (on the project, the Ray-token secret and each bucket),
the predefined roles an earlier podmanager granted taken back, a role of an older podmanager
(fewer permissions) brought up to date, and a second `up` changing nothing."""

from __future__ import annotations

import json

import pytest
import requests

from podmanager.cloud import errors as cloud_errors
from podmanager.cloud.gcp import emulator_identity
from podmanager.cloud.gcp.cluster_accounts import (
    BUCKET_PERMISSIONS,
    CONTROLLER_PERMISSIONS,
    ON_BUCKETS,
    ON_TOKEN,
    TOKEN_PERMISSIONS,
    accounts_for,
    controller_role,
    controller_role_id,
    grant_ray_token,
    with_vms_account,
)
from podmanager.cloud.gcp.project_iam import ProjectIam
from podmanager.cloud.gcp.secrets import TokenSecrets
from podmanager.cloud.gcp.storage import BucketIam
from podmanager.cluster import backends, controller_preflight
from podmanager.core.spec import parse_spec
from podmanager.emulator.iam import custom_roles, tokens
from podmanager.emulator.server import Emulator

PROJECT = "p-controller"


@pytest.fixture
def emulator():
    served = Emulator(PROJECT, persist=False)
    served.serve_rest()
    served.address = f"127.0.0.1:{served.start()}"
    yield served
    served.stop()


def test_the_controller_gets_its_custom_role_and_loses_the_predefined_ones(emulator, monkeypatch):
    spec = parse_spec({"name": "demo", "project": PROJECT, "zones": ["us-central2-b"],
                       "slices": [{"accelerator": "v4-8"}], "controller": {"local": False}})
    controller = f"serviceAccount:{accounts_for(spec).controller}"
    role_id = controller_role_id("demo")
    # What an earlier podmanager left: the account with two predefined roles, an older role.
    emulator.iam.create_account(controller.split(":")[1], "demo: controller VM")
    for old in ("roles/tpu.admin", "roles/compute.securityAdmin"):
        emulator.iam.grant(old, controller)
    emulator.iam.roles_call(custom_roles.create, role_id,
                            {"title": "podmanager demo: controller VM", "includedPermissions": ["tpu.nodes.list"]})
    monkeypatch.setattr(backends, "make_project_iam", lambda _spec: ProjectIam(
        PROJECT, endpoint=f"http://127.0.0.1:{emulator.rest_port}", caller=tokens.USER, pause_s=0.01))
    said = []
    controller_preflight._make_accounts(spec, lambda _kind, text: said.append(text))

    policy = emulator.iam.policy()
    name = f"projects/{PROJECT}/roles/{role_id}"
    assert sorted(role for role, members in policy.bindings.items() if controller in members) == [name]
    assert sorted(policy.custom_roles[role_id].permissions) == sorted(CONTROLLER_PERMISSIONS)
    for part, permissions in ((ON_TOKEN, TOKEN_PERMISSIONS), (ON_BUCKETS, BUCKET_PERMISSIONS)):
        assert sorted(policy.custom_roles[controller_role_id("demo", part)].permissions) == sorted(permissions)
    assert f"custom role {name} updated: what the controller VM calls" in said
    assert f"{controller} no longer granted roles/tpu.admin: its custom role replaces it" in said

    said.clear()
    controller_preflight._make_accounts(spec, lambda _kind, text: said.append(text))  # a second `up`
    assert said == [] and emulator.iam.policy().bindings == policy.bindings


SPEC = {"name": "demo", "project": PROJECT, "zones": ["us-central2-b"], "slices": [{"accelerator": "v4-8"}],
        "controller": {"local": False}}


def _accounts_made(emulator, monkeypatch):
    """The spec naming the cluster's VMs' account, both accounts and the three roles made, as the
    user's `up` leaves them; the controller's member."""
    spec = parse_spec(SPEC)
    accounts = accounts_for(spec)
    monkeypatch.setattr(backends, "make_project_iam", lambda _spec: ProjectIam(
        PROJECT, endpoint=f"http://127.0.0.1:{emulator.rest_port}", caller=tokens.USER, pause_s=0.01))
    filled = with_vms_account(spec, accounts.vms)
    controller_preflight._make_accounts(filled, lambda _kind, _text: None)
    return filled, f"serviceAccount:{accounts.controller}"


def _as(monkeypatch, member):
    """This process calls as `member` (a VM's account: the token its metadata server gives)."""
    email = member.removeprefix("serviceAccount:")
    monkeypatch.setattr(emulator_identity, "token", lambda: json.loads(tokens.metadata_token(email))["access_token"])
    monkeypatch.setattr(emulator_identity, "principal", lambda: member)


def _secrets(emulator):
    return TokenSecrets(PROJECT, emulator_host=emulator.address, call_timeout_s=10, retry_deadline_s=0)


def test_the_controller_keeps_the_ray_token_with_its_custom_role_and_may_not_change_who_reads_it(emulator,
                                                                                                monkeypatch):
    spec, controller = _accounts_made(emulator, monkeypatch)
    vms = spec.network.service_account
    with _secrets(emulator) as user:
        user.ensure("demo", "t0ken")
        user.grant_access("demo", controller.split(":")[1], role="roles/secretmanager.admin")  # an earlier podmanager's
        grant_ray_token(user, spec)
        name = user.secret_name("demo")
    bindings = emulator.api.secrets.bindings_of(name)
    assert [role for role, members in bindings if controller in members] == [controller_role(PROJECT, "demo", ON_TOKEN)]
    assert [role for role, members in bindings if f"serviceAccount:{vms}" in members] == [
        "roles/secretmanager.secretAccessor"]

    _as(monkeypatch, controller)
    with _secrets(emulator) as ctl:  # what its `up` and `down` call
        assert ctl.read("demo") == "t0ken"
        ctl.ensure("demo", "head-t0ken")
        assert not ctl.grant_access("demo", vms).added
        with pytest.raises(cloud_errors.PermissionDeniedError) as denied:
            ctl.grant_access("demo", "other@p-controller.iam.gserviceaccount.com")
        assert "secretmanager.secrets.setIamPolicy" in str(denied.value)
        ctl.delete("demo")
    assert emulator.api.secrets.bindings_of(name) == []  # gone


def test_the_controller_reads_each_bucket_with_its_custom_role_and_may_not_change_who_uses_it(emulator,
                                                                                             monkeypatch):
    spec, controller = _accounts_made(emulator, monkeypatch)
    rest, bucket = f"http://127.0.0.1:{emulator.rest_port}", f"{PROJECT}-podmanager"
    said = []
    with BucketIam(endpoint=rest, retry_delay_s=0.01) as user:
        user.bind(bucket, [("roles/storage.legacyBucketOwner", controller), ("roles/storage.objectViewer", controller)])
        controller_preflight.grant_on_buckets(spec, user, [bucket], controller, lambda _kind, text: said.append(text))
        role = controller_role(PROJECT, "demo", ON_BUCKETS)
        assert [b.role for b in user.policy(bucket).bindings if controller in b.members] == [role]
        assert f"{controller} no longer granted roles/storage.legacyBucketOwner on bucket {bucket}: {role} replaces it" \
            in said
        said.clear()
        controller_preflight.grant_on_buckets(spec, user, [bucket], controller, lambda _kind, text: said.append(text))
        assert said == []  # a second `up` changes nothing

    _as(monkeypatch, controller)
    with BucketIam(endpoint=rest, retry_delay_s=0.01) as ctl:
        ctl.check_exists(bucket)
        assert ctl.policy(bucket).bindings
        with pytest.raises(cloud_errors.PermissionDeniedError) as denied:
            ctl.bind(bucket, [("roles/storage.objectViewer", "serviceAccount:other@p.iam.gserviceaccount.com")])
        assert "storage.buckets.setIamPolicy" in str(denied.value)
    token = {"Authorization": f"Bearer {emulator_identity.token()}"}
    read = requests.get(f"{rest}/storage/v1/b/{bucket}/o/no-such-wheel?alt=media", headers=token, timeout=10)
    assert read.status_code == 404  # allowed to read: the object is missing, not forbidden
    stranger = {"Authorization": f"Bearer {tokens.issue('serviceAccount:stranger@p.iam.gserviceaccount.com')}"}
    refused = requests.get(f"{rest}/storage/v1/b/{bucket}/o/no-such-wheel?alt=media", headers=stranger, timeout=10)
    assert refused.status_code == 403 and "storage.objects.get" in refused.text
