"""Both secrets a cluster's VMs read (the Ray token, the channel's) are made and granted from the
user's machine by the user, never by the controller VM's own account (issue 45): under the
emulator's IAM the default compute account has Editor, which lacks
secretmanager.versions.access and secretmanager.secrets.setIamPolicy, so a controller VM that
made or granted them itself is refused as it would be on Google Cloud."""

from __future__ import annotations

import json
from typing import Any

import pytest

from podmanager.client.controller_machine import make_secrets
from podmanager.cloud.gcp import emulator_identity
from podmanager.cloud.gcp.secrets import TokenSecrets, channel_secret_id
from podmanager.controller import boot_lock
from podmanager.controller.cluster_hosts import ClusterHosts
from podmanager.controller.head import HeadStart, HeadState
from podmanager.core.spec import parse_spec
from podmanager.emulator.iam import tokens
from podmanager.emulator.server import Emulator
from podmanager.emulator.sim.cloud import SIMULATED_PROJECT_NUMBER
from podmanager.vm import auth

PROJECT = "proj-ctl"
DEFAULT_ACCOUNT = f"{SIMULATED_PROJECT_NUMBER}-compute@developer.gserviceaccount.com"
SPEC = {"name": "demo", "project": PROJECT, "zones": ["us-central2-b"], "slices": [{"accelerator": "v4-16"}],
        "boot": {"podmanager": "0.1.0"}, "controller": {"local": False, "caller": "203.0.113.7/32"}}


@pytest.fixture(autouse=True)
def offline_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(boot_lock, "compile_lock", lambda requirements, **_: "six==1.16.0\n")


@pytest.fixture
def emulator(monkeypatch: pytest.MonkeyPatch):
    served = Emulator(PROJECT, persist=False)
    address = f"127.0.0.1:{served.start()}"
    monkeypatch.setenv("TPU_EMULATOR_HOST", address)  # the secrets' host on both sides
    served.address = address
    yield served
    served.stop()


def as_controller_vm(monkeypatch: pytest.MonkeyPatch) -> None:
    """From here on this process is the controller VM: it calls as the default compute account."""
    monkeypatch.setattr(emulator_identity, "token",
                        lambda: json.loads(tokens.metadata_token(DEFAULT_ACCOUNT))["access_token"])
    monkeypatch.setattr(emulator_identity, "principal", lambda: f"serviceAccount:{DEFAULT_ACCOUNT}")


def controller_start(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The controller VM's `up` of the cluster, without its Ray half: a head at a fixed address."""
    monkeypatch.setattr(ClusterHosts, "begin_head",
                        lambda self: HeadStart("demo", HeadState(address="10.128.0.2:6379", started=False)))
    monkeypatch.setattr(ClusterHosts, "node_metadata", lambda self: {"podmanager-head": "10.128.0.2:6379"})
    return ClusterHosts(parse_spec(SPEC)).start()


def test_the_controller_vm_takes_the_users_secrets_and_grants_nothing(emulator, monkeypatch):
    make_secrets(parse_spec(SPEC), channel_token="channel-tok")  # the user's machine, as the user
    with TokenSecrets(PROJECT, emulator_host=emulator.address) as user:
        ray_token = user.read("demo")
    assert ray_token
    member = f"serviceAccount:{DEFAULT_ACCOUNT}"
    for secret in ("podmanager-demo-ray-token", channel_secret_id("demo")):
        bindings = emulator.api.secrets.bindings_of(f"projects/{PROJECT}/secrets/{secret}")
        assert ("roles/secretmanager.secretAccessor", [member]) in bindings
    grants = len(emulator.api.secrets.requests_of("SetIamPolicy"))

    as_controller_vm(monkeypatch)
    metadata = controller_start(monkeypatch)

    assert "startup-script" in metadata
    assert auth.token_path("demo").read_text() == ray_token  # the head's token is the user's
    assert len(emulator.api.secrets.requests_of("SetIamPolicy")) == grants  # the VM granted nothing


def test_a_second_up_from_the_users_machine_keeps_the_ray_token(emulator):
    make_secrets(parse_spec(SPEC), channel_token="channel-tok")
    with TokenSecrets(PROJECT, emulator_host=emulator.address) as user:
        first = user.read("demo")
    make_secrets(parse_spec(SPEC), channel_token="channel-tok")
    with TokenSecrets(PROJECT, emulator_host=emulator.address) as user:
        assert user.read("demo") == first
