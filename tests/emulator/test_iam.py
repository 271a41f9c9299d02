"""The simulated project's IAM (issue 45): every call is someone's (a bearer token the emulator
issued: the laptop's user, or a VM's service account from its metadata server), checked against
the project's policy, a secret's own policy and its enabled APIs, refused in Google's shapes."""

from __future__ import annotations

import json

import grpc
import pytest
import requests
from google.api_core import exceptions as google_exceptions
from google.cloud.secretmanager_v1 import SecretManagerServiceClient
from google.cloud.secretmanager_v1.services.secret_manager_service.transports import (
    SecretManagerServiceGrpcTransport,
)
from google.rpc import error_details_pb2

from podmanager.cloud import errors as cloud_errors
from podmanager.cloud.gcp import emulator_identity
from podmanager.cloud.gcp.secrets import TokenSecrets
from podmanager.core.errors import SpecError
from podmanager.emulator.iam import denials, methods, tokens
from podmanager.emulator.iam.gate import Gate
from podmanager.emulator.iam.project import ProjectIam, starting_point
from podmanager.emulator.iam.roles import ROLES
from podmanager.emulator.server import Emulator
from podmanager.emulator.sim.cloud import SIMULATED_PROJECT_NUMBER

PROJECT = "p-iam"
NUMBER = SIMULATED_PROJECT_NUMBER
DEFAULT_ACCOUNT = f"{NUMBER}-compute@developer.gserviceaccount.com"


# ---------------------------------------------------------------------- the tables


def test_editor_lacks_what_google_documents_it_lacks_and_owner_holds_it():
    for permission in ("secretmanager.versions.access", "secretmanager.secrets.setIamPolicy",
                       "resourcemanager.projects.setIamPolicy"):
        assert permission not in ROLES["roles/editor"]
        assert permission in ROLES["roles/owner"]
    assert "iam.serviceAccounts.actAs" not in ROLES["roles/tpu.admin"]
    assert "iam.serviceAccounts.actAs" not in ROLES["roles/compute.instanceAdmin.v1"]
    assert "iam.serviceAccounts.actAs" in ROLES["roles/iam.serviceAccountUser"]
    assert "storage.buckets.get" not in ROLES["roles/storage.objectAdmin"]


def test_the_compute_roles_split_firewall_rules_network_changes_and_vms_as_google_lists_them():
    # https://docs.cloud.google.com/iam/docs/roles-permissions/compute: only securityAdmin makes
    # firewall rules; networkAdmin changes networks and reads rules and VMs; all three read the
    # networks and their operations; Editor may act as service accounts.
    instance, network, security = (ROLES[f"roles/compute.{r}"] for r in ("instanceAdmin.v1", "networkAdmin",
                                                                          "securityAdmin"))
    assert "compute.firewalls.create" in security and "compute.firewalls.create" not in network | instance
    assert "compute.networks.updatePolicy" in security & network
    assert {"compute.routers.create", "compute.subnetworks.setPrivateIpGoogleAccess"} <= network - security - instance
    assert {"compute.instances.get", "compute.instances.list"} <= network
    assert "compute.instances.create" not in network | security
    reads = {"compute.networks.get", "compute.subnetworks.list", "compute.firewalls.list", "compute.routers.list",
             "compute.globalOperations.get"}
    assert reads <= instance & network & security
    assert "iam.serviceAccounts.actAs" in ROLES["roles/editor"]


def test_every_permission_an_emulated_method_needs_is_the_owners():
    needed = {p for method in methods.METHODS.values() for p in method.permissions} | {methods.ACT_AS}
    assert needed <= ROLES["roles/owner"]


@pytest.mark.parametrize("http, path, method_id", [
    ("POST", "/compute/v1/projects/p/zones/z/instances", "compute.instances.insert"),
    ("GET", "/compute/v1/projects/p/aggregated/instances?filter=x", "compute.instances.aggregatedList"),
    ("POST", "/compute/v1/projects/p/zones/z/operations/op-1/wait", "compute.zoneOperations.wait"),
    ("GET", "/compute/v1/projects/p/zones/z/instances/vm/getGuestAttributes", "compute.instances.getGuestAttributes"),
    ("POST", "/compute/v1/projects/p/global/firewalls", "compute.firewalls.insert"),
    ("PATCH", "/compute/v1/projects/p/global/firewalls/pm-c-channel", "compute.firewalls.patch"),
    ("GET", "/compute/v1/projects/p", "compute.projects.get"),
    ("GET", "/storage/v1/b/bkt/o/a%2Fb?alt=media", "storage.objects.get"),
    ("PUT", "/storage/v1/b/bkt/iam", "storage.buckets.setIamPolicy"),
    ("GET", "/v1/projects/p/secrets/s/versions/latest:access", "secretmanager.projects.secrets.versions.access"),
    ("POST", "/v3/projects/p:testIamPermissions", "cloudresourcemanager.projects.testIamPermissions"),
    ("POST", "/v1/projects/p/services/tpu.googleapis.com:enable", "serviceusage.services.enable"),
])
def test_rest_requests_resolve_to_their_discovery_method(http, path, method_id):
    call = methods.rest_call(http, path)
    assert call is not None and call.method == method_id and call.method in methods.METHODS


def test_denials_are_googles_shapes():
    compute = denials.permission_denied(methods.COMPUTE, "compute.instances.create", "projects/p/zones/z/instances/vm")
    assert json.loads(compute.json_body())["error"]["message"] == \
        "Required 'compute.instances.create' permission for 'projects/p/zones/z/instances/vm'"
    newer = json.loads(denials.permission_denied(methods.TPU, "tpu.nodes.create", "projects/p/locations/z").json_body())
    assert newer["error"]["message"] == \
        "Permission 'tpu.nodes.create' denied for resource 'projects/p/locations/z' (or it may not exist)."
    assert newer["error"]["details"][0]["reason"] == "IAM_PERMISSION_DENIED"
    disabled = denials.service_disabled("tpu.googleapis.com", NUMBER)
    error = json.loads(disabled.json_body())["error"]
    assert (error["code"], error["status"]) == (403, "PERMISSION_DENIED")
    info = error["details"][0]
    assert info["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
    assert (info["reason"], info["domain"]) == ("SERVICE_DISABLED", "googleapis.com")
    assert info["metadata"]["service"] == "tpu.googleapis.com"
    assert info["metadata"]["consumer"] == f"projects/{NUMBER}"
    assert info["metadata"]["activationUrl"] == \
        f"https://console.developers.google.com/apis/api/tpu.googleapis.com/overview?project={NUMBER}"
    status = disabled.grpc_status()
    unpacked = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(unpacked) and unpacked.reason == "SERVICE_DISABLED"


def test_tokens_stand_for_whom_they_were_issued_to_and_no_one_else():
    token = tokens.issue("serviceAccount:a@p.iam.gserviceaccount.com")
    assert tokens.principal_of(token) == "serviceAccount:a@p.iam.gserviceaccount.com"
    forged = token.replace(token.rsplit(".", 1)[1], "0" * 40)
    assert tokens.principal_of(forged) is None
    assert tokens.principal_of("sim-token.a@p.iam.gserviceaccount.com") is None


def test_a_simulated_cloud_made_anew_signs_with_its_own_key():
    """The key is kept in memory by its file: a cloud deleted and made again at the same place
    has a new key, and a token of the old one is no one's there."""
    old = tokens.issue(tokens.USER)
    key_file = tokens._key_path()
    key_file.unlink()
    new = tokens.issue(tokens.USER)
    assert key_file.exists() and new != old
    assert tokens.principal_of(new) == tokens.USER and tokens.principal_of(old) is None


def test_the_default_project_and_a_new_secure_by_default_one():
    default = starting_point("no-organization", NUMBER)
    assert default.bindings == {"roles/owner": [tokens.USER], "roles/editor": [f"serviceAccount:{DEFAULT_ACCOUNT}"]}
    assert {"tpu.googleapis.com", "compute.googleapis.com", "secretmanager.googleapis.com"} <= set(default.services)
    new = starting_point("new", NUMBER)
    assert new.bindings == {"roles/owner": [tokens.USER]}
    assert {"serviceusage.googleapis.com", "storage.googleapis.com", "logging.googleapis.com"} <= set(new.services)
    assert not {"compute.googleapis.com", "tpu.googleapis.com", "secretmanager.googleapis.com", "iam.googleapis.com",
                "cloudresourcemanager.googleapis.com"} & set(new.services)


def test_a_gate_checks_act_as_on_the_account_a_node_runs_as():
    iam = ProjectIam(NUMBER, starting_point("no-organization", NUMBER))
    iam.grant("roles/tpu.admin", "user:ops@example.com")
    gate = Gate(iam)
    denial = gate.check("tpu.projects.locations.nodes.create", "user:ops@example.com", "projects/p/locations/z",
                        act_as=f"serviceAccount:{DEFAULT_ACCOUNT}")
    assert denial is not None and "iam.serviceAccounts.actAs" in denial.message and DEFAULT_ACCOUNT in denial.message
    iam.grant("roles/iam.serviceAccountUser", "user:ops@example.com")
    assert gate.check("tpu.projects.locations.nodes.create", "user:ops@example.com", "projects/p/locations/z",
                      act_as=f"serviceAccount:{DEFAULT_ACCOUNT}") is None


def test_unknown_roles_and_members_are_refused_by_name():
    iam = ProjectIam(NUMBER, starting_point("no-organization", NUMBER))
    with pytest.raises(SpecError, match="--grant 'roles/tpu.god'"):
        iam.grant("roles/tpu.god", "user:a@example.com")
    with pytest.raises(SpecError, match="--member 'a@example.com'"):
        iam.grant("roles/tpu.admin", "a@example.com")
    with pytest.raises(SpecError, match="--kind 'old'"):
        iam.set_kind("old")


# ---------------------------------------------------------------------- served


@pytest.fixture
def emulator():
    served = Emulator(PROJECT, persist=False)
    served.serve_rest()
    port = served.start()
    served.address = f"127.0.0.1:{port}"
    yield served
    served.stop()


def as_vm(monkeypatch, email: str) -> None:
    """This process calls as a VM running as `email`: its token is what the metadata server gives."""
    monkeypatch.setattr(emulator_identity, "token",
                        lambda: json.loads(tokens.metadata_token(email))["access_token"])
    monkeypatch.setattr(emulator_identity, "principal", lambda: f"serviceAccount:{email}")


def secrets_api(emulator, **options) -> TokenSecrets:
    return TokenSecrets(PROJECT, emulator_host=emulator.address, call_timeout_s=10, retry_deadline_s=0, **options)


def test_the_user_may_make_and_grant_the_secret_a_vm_s_editor_account_may_not(emulator, monkeypatch):
    with secrets_api(emulator) as user:
        user.ensure("c", "t0ken")
        assert user.grant_access("c").added
    as_vm(monkeypatch, DEFAULT_ACCOUNT)
    with secrets_api(emulator) as vm:
        assert vm.read("c") == "t0ken"  # granted secretAccessor on the secret itself
        with pytest.raises(cloud_errors.PermissionDeniedError) as denied:
            vm.grant_access("c", "other@p-iam.iam.gserviceaccount.com")
    assert "secretmanager.secrets.setIamPolicy" in str(denied.value)
    assert DEFAULT_ACCOUNT in str(denied.value) + (denied.value.hint or "")


def test_a_call_without_a_token_or_with_a_forged_one_is_401(emulator):
    channel = grpc.insecure_channel(emulator.address)
    client = SecretManagerServiceClient(transport=SecretManagerServiceGrpcTransport(channel=channel))
    with pytest.raises(google_exceptions.Unauthenticated):
        client.get_secret(name=f"projects/{PROJECT}/secrets/s")
    rest = f"http://127.0.0.1:{emulator.rest_port}"
    answer = requests.get(f"{rest}/compute/v1/projects/{PROJECT}/global/networks",
                          headers={"Authorization": "Bearer ya29.sim.bm9ib2R5.0000"}, timeout=10)
    assert answer.status_code == 401 and answer.json()["error"]["status"] == "UNAUTHENTICATED"


def test_a_vm_account_without_a_role_is_refused_in_googles_words(emulator, monkeypatch):
    emulator.change_project(kind="new")
    emulator.change_project(enable=["compute.googleapis.com"])
    account = "bare@p-iam.iam.gserviceaccount.com"
    rest = f"http://127.0.0.1:{emulator.rest_port}"
    headers = {"Authorization": f"Bearer {tokens.issue(f'serviceAccount:{account}')}"}
    answer = requests.get(f"{rest}/compute/v1/projects/{PROJECT}/zones/us-central2-b/instances", headers=headers,
                          timeout=10)
    assert answer.status_code == 403
    assert answer.json()["error"]["message"] == \
        f"Required 'compute.instances.list' permission for 'projects/{PROJECT}/zones/us-central2-b'"


def test_a_disabled_api_answers_service_disabled_over_grpc_and_rest(emulator):
    emulator.change_project(kind="new")
    with secrets_api(emulator) as user, pytest.raises(cloud_errors.CloudError) as refused:
        user.ensure("c", "t0ken")
    assert "SERVICE_DISABLED" in str(refused.value) and "secretmanager.googleapis.com" in str(refused.value)
    assert refused.value.exit_code == 2
    rest = f"http://127.0.0.1:{emulator.rest_port}"
    headers = {"Authorization": f"Bearer {emulator_identity.token()}"}
    answer = requests.get(f"{rest}/compute/v1/projects/{PROJECT}/global/networks", headers=headers, timeout=10)
    info = answer.json()["error"]["details"][0]
    assert answer.status_code == 403 and info["reason"] == "SERVICE_DISABLED"
    assert info["metadata"]["service"] == "compute.googleapis.com"
    enabled = requests.post(f"{rest}/v1/projects/{PROJECT}/services/compute.googleapis.com:enable", headers=headers,
                            timeout=10)
    assert enabled.json()["response"]["service"]["state"] == "ENABLED"
    assert requests.get(f"{rest}/compute/v1/projects/{PROJECT}/global/networks", headers=headers,
                        timeout=10).status_code == 200


def test_test_iam_permissions_returns_the_subset_held(emulator):
    rest = f"http://127.0.0.1:{emulator.rest_port}"
    asked = ["tpu.nodes.create", "secretmanager.secrets.setIamPolicy", "secretmanager.versions.access"]
    vm = {"Authorization": f"Bearer {tokens.issue(f'serviceAccount:{DEFAULT_ACCOUNT}')}"}
    held = requests.post(f"{rest}/v3/projects/{PROJECT}:testIamPermissions", json={"permissions": asked}, headers=vm,
                         timeout=10).json()
    assert held == {"permissions": ["tpu.nodes.create"]}  # Editor
    user = {"Authorization": f"Bearer {emulator_identity.token()}"}
    assert requests.post(f"{rest}/v3/projects/{PROJECT}:testIamPermissions", json={"permissions": asked},
                         headers=user, timeout=10).json() == {"permissions": asked}  # Owner


def test_a_secret_s_own_policy_counts_for_its_calls(emulator, monkeypatch):
    with secrets_api(emulator) as user:
        user.ensure("c", "t0ken")
    reader = "reader@p-iam.iam.gserviceaccount.com"
    with monkeypatch.context() as vm_side:
        as_vm(vm_side, reader)
        with secrets_api(emulator) as vm, pytest.raises(cloud_errors.PermissionDeniedError) as denied:
            vm.read("c")
        assert "secretmanager.versions.access" in str(denied.value) and reader in str(denied.value)
        assert "roles/secretmanager.secretAccessor" in (denied.value.hint or "")
    with secrets_api(emulator) as user:
        user.grant_access("c", reader)
    as_vm(monkeypatch, reader)
    with secrets_api(emulator) as vm:
        assert vm.read("c") == "t0ken"


def test_a_new_buckets_policy_lets_the_projects_editors_grant_on_it_and_no_one_else(emulator):
    # https://docs.cloud.google.com/storage/docs/access-control/iam#convenience-values: Editor has no
    # storage.buckets.setIamPolicy of its own; a new bucket's policy gives it to projectEditor:P.
    rest, bucket = f"http://127.0.0.1:{emulator.rest_port}", f"{PROJECT}-podmanager"
    vm = {"Authorization": f"Bearer {tokens.issue(f'serviceAccount:{DEFAULT_ACCOUNT}')}"}  # Editor
    policy = requests.get(f"{rest}/storage/v1/b/{bucket}/iam", headers=vm, timeout=10).json()
    assert {"role": "roles/storage.legacyBucketOwner",
            "members": [f"projectOwner:{PROJECT}", f"projectEditor:{PROJECT}"]} in policy["bindings"]
    granted = {"bindings": [*policy["bindings"], {"role": "roles/storage.objectViewer",
                                                  "members": ["serviceAccount:vm@p.iam.gserviceaccount.com"]}],
               "etag": policy["etag"]}
    stranger = {"Authorization": f"Bearer {tokens.issue('serviceAccount:stranger@p.iam.gserviceaccount.com')}"}
    refused = requests.put(f"{rest}/storage/v1/b/{bucket}/iam", json=granted, headers=stranger, timeout=10)
    assert refused.status_code == 403 and "storage.buckets.setIamPolicy" in refused.json()["error"]["message"]
    assert requests.put(f"{rest}/storage/v1/b/{bucket}/iam", json=granted, headers=vm, timeout=10).status_code == 200
