"""The simulated project's service accounts and IAM policy (issue 45), through podmanager's client
(`cloud/gcp/project_iam.py`) against a served emulator: accounts made once, grants written with
the read's etag and tried again over a concurrent change, each method checked by the gate with
the permission Google documents, a VM or node refused an account the project does not have,
and every call remembered with who made it."""

from __future__ import annotations

import pytest
import requests
from served_emulator import served_emulator

from podmanager.cloud import errors as cloud_errors
from podmanager.cloud.gcp.permissions import MissingPermissionError
from podmanager.cloud.gcp.project_iam import ProjectIam
from podmanager.emulator.iam import tokens
from podmanager.emulator.iam.gate import Gate
from podmanager.emulator.iam.project import ProjectIam as SimulatedIam
from podmanager.emulator.iam.project import starting_point
from podmanager.emulator.sim.cloud import SIMULATED_PROJECT_NUMBER

PROJECT = "p-accounts"
NUMBER = SIMULATED_PROJECT_NUMBER
VMS = f"pm-c-vms@{PROJECT}.iam.gserviceaccount.com"


@pytest.fixture
def emulator():
    with served_emulator(PROJECT) as served:
        yield served


def client(emulator, **options) -> ProjectIam:
    return ProjectIam(PROJECT, endpoint=f"http://127.0.0.1:{emulator.rest_port}", caller=tokens.USER, pause_s=0.01,
                      **options)


def test_an_account_is_made_once_and_a_second_make_is_no_error(emulator):
    with client(emulator) as iam:
        assert iam.ensure_account("pm-c-vms", "c: TPU VMs") == (VMS, True)
        assert iam.ensure_account("pm-c-vms", "c: TPU VMs") == (VMS, False)
    assert emulator.iam.account_exists(VMS)
    [create, again] = emulator.gate.calls_made(["iam.projects.serviceAccounts.create"])
    assert create["principal"] == again["principal"] == tokens.USER and create["denied"] is None


def test_a_bad_account_id_is_refused_as_google_refuses_it(emulator):
    with client(emulator) as iam, pytest.raises(cloud_errors.InvalidRequestError, match="Invalid account id"):
        iam.ensure_account("PM_Bad", "bad")


def test_grants_are_added_once_and_a_concurrent_change_is_read_again(emulator):
    with client(emulator) as iam:
        iam.ensure_account("pm-c-vms", "c")
        changed = []

        def someone_else_writes(response, *args, **kwargs):  # between this grant's read and its write
            if response.url.endswith(":getIamPolicy") and not changed:
                changed.append(True)
                emulator.iam.grant("roles/viewer", "user:other@example.com")

        iam._session.hooks["response"].append(someone_else_writes)
        assert iam.grant([("roles/tpu.viewer", f"serviceAccount:{VMS}")]) == [("roles/tpu.viewer", f"serviceAccount:{VMS}")]
        assert iam.grant([("roles/tpu.viewer", f"serviceAccount:{VMS}")]) == []  # there already: nothing written
    bindings = emulator.iam.policy().bindings
    assert bindings["roles/tpu.viewer"] == [f"serviceAccount:{VMS}"]
    assert bindings["roles/viewer"] == ["user:other@example.com"]  # the concurrent change was not overwritten
    sets = emulator.gate.calls_made(["cloudresourcemanager.projects.setIamPolicy"])
    assert len(sets) == 2  # the first, refused 409 ABORTED by the emulator, and the one after reading again


def test_a_grant_to_an_account_the_project_lacks_is_refused_naming_it(emulator):
    with client(emulator, retry_s=0) as iam, pytest.raises(cloud_errors.InvalidRequestError) as refused:
        iam.grant([("roles/tpu.viewer", "serviceAccount:nobody@p-accounts.iam.gserviceaccount.com")])
    assert "Service account nobody@p-accounts.iam.gserviceaccount.com does not exist" in str(refused.value)


def test_an_editor_may_make_accounts_but_not_grant_roles_on_the_project(emulator):
    editor = "user:editor@example.com"
    emulator.iam.grant("roles/editor", editor)
    with ProjectIam(PROJECT, endpoint=f"http://127.0.0.1:{emulator.rest_port}", caller=editor) as iam:
        iam._session.headers["Authorization"] = f"Bearer {tokens.issue(editor)}"
        assert iam.ensure_account("pm-c-vms", "c")[1]
        with pytest.raises(MissingPermissionError) as denied:
            iam.grant([("roles/tpu.viewer", f"serviceAccount:{VMS}")])
        assert "resourcemanager.projects.setIamPolicy" in str(denied.value)
        assert "roles/resourcemanager.projectIamAdmin" in (denied.value.hint or "")
        assert iam.missing(["tpu.nodes.create", "resourcemanager.projects.setIamPolicy"]) == [
            "resourcemanager.projects.setIamPolicy"]


def test_act_as_granted_on_the_account_alone_lets_its_holder_run_a_node_as_it_and_no_other():
    iam = SimulatedIam(NUMBER, starting_point("no-organization", NUMBER))
    iam.create_account(VMS, "vms")
    iam.create_account("other@p.iam.gserviceaccount.com", "other")
    ops = "serviceAccount:ops@p.iam.gserviceaccount.com"
    iam.create_account("ops@p.iam.gserviceaccount.com", "ops")
    iam.grant("roles/tpu.admin", ops)
    iam.set_account_policy(VMS, {"roles/iam.serviceAccountUser": [ops]})
    gate = Gate(iam)
    create = "tpu.projects.locations.nodes.create"
    assert gate.check(create, ops, "projects/p/locations/z", act_as=f"serviceAccount:{VMS}") is None
    denial = gate.check(create, ops, "projects/p/locations/z", act_as="serviceAccount:other@p.iam.gserviceaccount.com")
    assert denial is not None and "iam.serviceAccounts.actAs" in denial.message


def test_a_node_or_vm_asking_for_an_account_the_project_lacks_is_refused_400():
    iam = SimulatedIam(NUMBER, starting_point("new", NUMBER))
    iam.enable("tpu.googleapis.com")
    gate = Gate(iam)
    denial = gate.check("tpu.projects.locations.nodes.create", tokens.USER, "projects/p/locations/z",
                        act_as=f"serviceAccount:{VMS}")
    assert denial is not None and (denial.http, denial.status) == (400, "INVALID_ARGUMENT")
    assert denial.message == f"Service account {VMS} does not exist."
    # The default compute account is there only once Compute Engine is enabled.
    default = f"serviceAccount:{NUMBER}-compute@developer.gserviceaccount.com"
    assert gate.check("tpu.projects.locations.nodes.create", tokens.USER, "projects/p/locations/z",
                      act_as=default).http == 400
    iam.enable("compute.googleapis.com")
    assert gate.check("tpu.projects.locations.nodes.create", tokens.USER, "projects/p/locations/z",
                      act_as=default) is None
    iam.create_account(VMS, "vms")
    assert gate.check("tpu.projects.locations.nodes.create", tokens.USER, "projects/p/locations/z",
                      act_as=f"serviceAccount:{VMS}") is None


def test_the_account_and_policy_routes_are_checked_by_the_gate_and_the_schema(emulator):
    rest = f"http://127.0.0.1:{emulator.rest_port}"
    stranger = {"Authorization": f"Bearer {tokens.issue('user:stranger@example.com')}"}
    for path in (f"/v3/projects/{PROJECT}:getIamPolicy", f"/v3/projects/{PROJECT}:setIamPolicy"):
        refused = requests.post(rest + path, json={}, headers=stranger, timeout=10)
        assert refused.status_code == 403 and "resourcemanager.projects." in refused.json()["error"]["message"]
    refused = requests.post(f"{rest}/v1/projects/{PROJECT}/serviceAccounts", json={"accountId": "pm-c-vms"},
                            headers=stranger, timeout=10)
    assert refused.status_code == 403 and "iam.serviceAccounts.create" in refused.json()["error"]["message"]
    user = {"Authorization": f"Bearer {tokens.issue(tokens.USER)}"}
    unknown = requests.post(f"{rest}/v1/projects/{PROJECT}/serviceAccounts", json={"accountID": "pm-c-vms"},
                            headers=user, timeout=10)
    assert unknown.status_code == 400 and 'Unknown name "accountID"' in unknown.json()["error"]["message"]
    missing = requests.get(f"{rest}/v1/projects/{PROJECT}/serviceAccounts/{VMS}", headers=user, timeout=10)
    assert missing.status_code == 404
