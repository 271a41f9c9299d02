"""What the user's `up` grants the cluster's controller VM account before the VM exists
(`cluster/controller_preflight.py`), against a served emulator: the cluster's custom role made and
granted, the predefined roles an earlier podmanager granted taken back, a role of an older
podmanager (fewer permissions) brought up to date, and a second `up` changing nothing."""

from __future__ import annotations

import pytest

from podmanager.cloud.gcp.cluster_accounts import (
    CONTROLLER_PERMISSIONS,
    accounts_for,
    controller_role_id,
)
from podmanager.cloud.gcp.project_iam import ProjectIam
from podmanager.cluster import backends, controller_preflight
from podmanager.core.spec import parse_spec
from podmanager.emulator.iam import custom_roles, tokens
from podmanager.emulator.server import Emulator

PROJECT = "p-controller"


@pytest.fixture
def emulator():
    served = Emulator(PROJECT, persist=False)
    served.serve_rest()
    served.start()
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
    assert f"custom role {name} updated: what the controller VM calls" in said
    assert f"{controller} no longer granted roles/tpu.admin: its custom role replaces it" in said

    said.clear()
    controller_preflight._make_accounts(spec, lambda _kind, text: said.append(text))  # a second `up`
    assert said == [] and emulator.iam.policy().bindings == policy.bindings
