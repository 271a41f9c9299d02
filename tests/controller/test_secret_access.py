"""podmanager grants the TPU VMs' service account read access to the Ray-token secret: the real
Secret Manager client (`TokenSecrets.grant_access`, and `up`'s boot metadata through
`ClusterHosts.start`) against the emulator's Secret Manager, IAM policy and etags included.

The emulator is given the project's number, so the names it returns carry it as Google's do
(projects/NUMBER/secrets/ID): that is where the default compute service account comes from.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from google.cloud.secretmanager_v1 import SecretManagerServiceClient
from google.cloud.secretmanager_v1.services.secret_manager_service.transports import (
    SecretManagerServiceGrpcTransport,
)
from google.iam.v1 import policy_pb2
from google.type import expr_pb2

from podmanager.cloud import errors
from podmanager.cloud.gcp.secrets import ACCESSOR_ROLE, SecretAccess, TokenSecrets
from podmanager.controller import boot_lock
from podmanager.controller.cluster_hosts import ClusterHosts
from podmanager.controller.head import HeadStart, HeadState
from podmanager.core.clock import FakeClock
from podmanager.core.spec import parse_spec
from podmanager.emulator.secret_manager import SecretManagerEmulator
from podmanager.emulator.sim.cloud import SimCloud
from podmanager.emulator.tpu_api import TpuEmulator
from podmanager.vm import auth

PROJECT = "my-project"
NUMBER = "123456789012"
TOKEN = "tok-3c5e7a9b1d2f4a6c8e0b2d4f6a8c0e1b"
SECRET = f"projects/{NUMBER}/secrets/podmanager-demo-ray-token"
DEFAULT_ACCOUNT = f"serviceAccount:{NUMBER}-compute@developer.gserviceaccount.com"
VMS = "tpu-vms@my-project.iam.gserviceaccount.com"


@pytest.fixture(autouse=True)
def offline_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    """No package index here: the VMs' lock is a fixed one (tests/test_boot_lock.py compiles real ones)."""
    monkeypatch.setattr(boot_lock, "compile_lock", lambda requirements, **_: "six==1.16.0\n")


@dataclass
class Rig:
    service: SecretManagerEmulator
    client: SecretManagerServiceClient
    address: str

    def secrets(self, client: Any = None) -> TokenSecrets:
        return TokenSecrets(PROJECT, client=client or self.client, clock=FakeClock(), call_timeout_s=10.0)

    def accessors(self) -> list[str]:
        """The members with unconditional read access to the secret, as stored."""
        policy = self.client.get_iam_policy(request={"resource": SECRET})
        return sorted(m for b in policy.bindings if b.role == ACCESSOR_ROLE and not b.HasField("condition")
                      for m in b.members)

    def calls(self, method: str) -> int:
        return len(self.service.requests_of(method))


def serve(service: SecretManagerEmulator) -> Iterator[Rig]:
    server, port = TpuEmulator(SimCloud(PROJECT, clock=FakeClock()), service).serve()
    address = f"127.0.0.1:{port}"
    channel = grpc.insecure_channel(address)
    try:
        yield Rig(service, SecretManagerServiceClient(transport=SecretManagerServiceGrpcTransport(channel=channel)),
                  address)
    finally:
        channel.close()
        server.stop(grace=None).wait()


@pytest.fixture
def rig() -> Iterator[Rig]:
    yield from serve(SecretManagerEmulator(project_numbers={PROJECT: NUMBER}))


@pytest.fixture
def unnumbered() -> Iterator[Rig]:
    """An emulator that keeps project ids in the names it returns: no number to be had."""
    yield from serve(SecretManagerEmulator())


def made(rig: Rig) -> TokenSecrets:
    secrets = rig.secrets()
    secrets.ensure("demo", TOKEN)
    return secrets


# ---------------------------------------------------------------------- whom it grants


def test_the_default_compute_account_gets_read_access_by_the_projects_number(rig: Rig) -> None:
    access = made(rig).grant_access("demo")

    assert access == SecretAccess(DEFAULT_ACCOUNT, added=True)
    (read,) = rig.service.requests_of("GetIamPolicy")
    (written,) = rig.service.requests_of("SetIamPolicy")
    assert read.options.requested_policy_version == 3  # conditional bindings read whole, so none is lost
    assert written.resource.endswith("/secrets/podmanager-demo-ray-token") and written.policy.etag  # the read's
    assert rig.accessors() == [DEFAULT_ACCOUNT]


def test_the_specs_service_account_is_granted_without_looking_up_the_project(rig: Rig) -> None:
    secrets = made(rig)
    gets_before = rig.calls("GetSecret")

    access = secrets.grant_access("demo", VMS)

    assert access == SecretAccess(f"serviceAccount:{VMS}", added=True)
    assert rig.accessors() == [f"serviceAccount:{VMS}"]
    assert rig.calls("GetSecret") == gets_before


def test_granting_again_writes_nothing(rig: Rig) -> None:
    secrets = made(rig)
    secrets.grant_access("demo")

    assert secrets.grant_access("demo") == SecretAccess(DEFAULT_ACCOUNT, added=False)
    assert rig.calls("SetIamPolicy") == 1


def test_other_bindings_and_members_are_kept(rig: Rig) -> None:
    secrets = made(rig)
    first = rig.client.get_iam_policy(request={"resource": SECRET})
    rig.client.set_iam_policy(request={"resource": SECRET, "policy": policy_pb2.Policy(etag=first.etag, bindings=[
        policy_pb2.Binding(role=ACCESSOR_ROLE, members=["user:ada@example.com"]),
        policy_pb2.Binding(role="roles/secretmanager.admin", members=["group:ops@example.com"]),
    ])})

    secrets.grant_access("demo", VMS)

    policy = rig.client.get_iam_policy(request={"resource": SECRET})
    roles = {b.role: sorted(b.members) for b in policy.bindings}
    assert roles == {ACCESSOR_ROLE: [f"serviceAccount:{VMS}", "user:ada@example.com"],
                     "roles/secretmanager.admin": ["group:ops@example.com"]}


def test_a_conditional_binding_is_not_taken_for_access_and_is_kept(rig: Rig) -> None:
    secrets = made(rig)
    first = rig.client.get_iam_policy(request={"resource": SECRET})
    expiring = policy_pb2.Binding(role=ACCESSOR_ROLE, members=[f"serviceAccount:{VMS}"], condition=expr_pb2.Expr(
        title="until friday", expression='request.time < timestamp("2020-01-01T00:00:00Z")'))
    rig.client.set_iam_policy(request={"resource": SECRET, "policy": policy_pb2.Policy(
        etag=first.etag, version=3, bindings=[expiring])})

    assert secrets.grant_access("demo", VMS).added

    policy = rig.client.get_iam_policy(request={"resource": SECRET})
    assert rig.accessors() == [f"serviceAccount:{VMS}"]
    assert [b.condition.title for b in policy.bindings if b.HasField("condition")] == ["until friday"]


# ---------------------------------------------------------------------- etags and failures


class RacingClient:
    """The real client, but someone else changes the policy right after our first read of it."""

    def __init__(self, client: SecretManagerServiceClient, rival: str):
        self._client, self._rival, self.raced = client, rival, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def get_iam_policy(self, **call: Any) -> policy_pb2.Policy:
        policy = self._client.get_iam_policy(**call)
        if not self.raced:
            self.raced = True
            theirs = policy_pb2.Policy()
            theirs.CopyFrom(policy)
            theirs.bindings.append(policy_pb2.Binding(role=ACCESSOR_ROLE, members=[self._rival]))
            self._client.set_iam_policy(request={"resource": SECRET, "policy": theirs})
        return policy


def test_a_concurrent_change_is_not_overwritten_the_grant_is_read_again(rig: Rig) -> None:
    made(rig)
    racing = RacingClient(rig.client, "user:rival@example.com")

    access = rig.secrets(client=racing).grant_access("demo", VMS)

    assert racing.raced and access.added
    assert rig.accessors() == [f"serviceAccount:{VMS}", "user:rival@example.com"]
    assert rig.calls("GetIamPolicy") == 2 + 1  # ours twice (the stale write was refused), the check above once


def test_a_second_aborted_write_is_an_error(rig: Rig) -> None:
    secrets = made(rig)
    rig.service.fail_next("SetIamPolicy", grpc.StatusCode.ABORTED, "There were concurrent policy changes.", times=2)

    with pytest.raises(errors.CloudError, match="concurrent policy changes"):
        secrets.grant_access("demo", VMS)
    assert rig.calls("SetIamPolicy") == 2 and rig.accessors() == []


def test_one_aborted_write_is_retried(rig: Rig) -> None:
    secrets = made(rig)
    rig.service.fail_next("SetIamPolicy", grpc.StatusCode.ABORTED, "There were concurrent policy changes.")

    assert secrets.grant_access("demo", VMS).added
    assert rig.calls("SetIamPolicy") == 2 and rig.accessors() == [f"serviceAccount:{VMS}"]


def test_an_account_the_service_refuses_names_the_spec_field(rig: Rig) -> None:
    secrets = made(rig)
    rig.service.fail_next("SetIamPolicy", grpc.StatusCode.INVALID_ARGUMENT,
                          f"Service account {VMS} does not exist.")

    with pytest.raises(errors.InvalidRequestError) as refused:
        secrets.grant_access("demo", VMS)

    assert "does not exist" in str(refused.value) and "network.service_account" in str(refused.value.hint)
    assert rig.calls("SetIamPolicy") == 1


def test_no_permission_to_grant_names_the_role(rig: Rig) -> None:
    secrets = made(rig)
    rig.service.fail_next("SetIamPolicy", grpc.StatusCode.PERMISSION_DENIED, "secretmanager.secrets.setIamPolicy")

    with pytest.raises(errors.PermissionDeniedError, match="roles/secretmanager.admin"):
        secrets.grant_access("demo")


def test_without_the_projects_number_nothing_is_granted_and_it_says_why(unnumbered: Rig) -> None:
    secrets = made(unnumbered)

    access = secrets.grant_access("demo")

    assert access.member is None and not access.added
    assert "without the project's number" in access.reason
    assert unnumbered.calls("SetIamPolicy") == 0
    assert secrets.grant_access("demo", VMS).added  # a named account needs no number


# ---------------------------------------------------------------------- `up`: the boot metadata


def start_hosts(spec: dict[str, Any], address: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """`start` without its Ray half: a head at a fixed address, its metadata entry."""
    monkeypatch.setenv("TPU_EMULATOR_HOST", address)
    monkeypatch.setattr(ClusterHosts, "begin_head",
                        lambda self: HeadStart("demo", HeadState(address="10.128.0.2:6379", started=False)))
    monkeypatch.setattr(ClusterHosts, "node_metadata", lambda self: {"podmanager-head": "10.128.0.2:6379"})
    return ClusterHosts(parse_spec(spec)).start()


# This machine as the controller (inside the VPC): it grants the VMs' account itself.
GCP = {"name": "demo", "project": PROJECT, "zones": ["us-central2-b"], "slices": [{"accelerator": "v4-16"}],
       "boot": {"podmanager": "0.1.0"},  # a version on the index: nothing to stage
       "controller": {"local": True}}


def test_up_grants_the_specs_service_account(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    metadata = start_hosts({**GCP, "network": {"service_account": VMS}}, rig.address, monkeypatch)

    assert "startup-script" in metadata
    assert rig.accessors() == [f"serviceAccount:{VMS}"]


def test_up_grants_the_default_compute_account_without_a_network_section(
        rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    start_hosts(GCP, rig.address, monkeypatch)
    start_hosts(GCP, rig.address, monkeypatch)  # `up` again: nothing more written

    assert rig.accessors() == [DEFAULT_ACCOUNT] and rig.calls("SetIamPolicy") == 1


def test_up_says_so_when_it_cannot_grant(unnumbered: Rig, monkeypatch: pytest.MonkeyPatch,
                                         caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="podmanager.controller.cluster_hosts"):
        metadata = start_hosts(GCP, unnumbered.address, monkeypatch)

    assert "startup-script" in metadata  # not fatal: a grant made by hand works as well
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "did not grant the TPU VMs read access" in warning and "network.service_account" in warning
    assert ("gcloud secrets add-iam-policy-binding podmanager-demo-ray-token --project my-project --member "
            "serviceAccount:PROJECT_NUMBER-compute@developer.gserviceaccount.com "
            "--role roles/secretmanager.secretAccessor") in warning
    assert auth.token_path("demo").read_text().strip() not in warning
