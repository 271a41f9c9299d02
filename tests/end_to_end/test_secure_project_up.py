"""A first `up` in a new project of a secure-by-default organization (issue 45), driven from the
command line as a user would, from a folder of their own: the APIs are named and enabled
(`sim project --enable`, what the console does), a user lacking permissions is refused before
anything is made, naming each with its role and command, and then `up` comes up with the
cluster's own service account: the TPU VM reads the Ray token as that account (the emulator
checks every call by identity), and the default compute account, which has no role in such a
project, makes no call at all. With a controller VM (`controller.local: false`) the controller
runs as the cluster's second account and makes the cluster's calls as it, none refused: on the
project its account holds only the cluster's custom role, whose permissions are exactly those of
the calls it makes there."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from podmanager.cloud.gcp.cluster_accounts import (
    CONTROLLER_CALLS,
    CONTROLLER_PERMISSIONS,
)
from podmanager.emulator import launcher
from podmanager.emulator.control import EmulatorControl
from podmanager.emulator.iam.tokens import USER
from podmanager.emulator.sim.cloud import SIMULATED_PROJECT_NUMBER

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]
PROJECT = "podmanager-sim"
NAME = "secure"
VMS = f"serviceAccount:pm-{NAME}-vms@{PROJECT}.iam.gserviceaccount.com"
DEFAULT = f"serviceAccount:{SIMULATED_PROJECT_NUMBER}-compute@developer.gserviceaccount.com"
APIS = ("tpu.googleapis.com", "compute.googleapis.com", "cloudresourcemanager.googleapis.com", "iam.googleapis.com",
        "secretmanager.googleapis.com")


CONTROLLER = f"serviceAccount:pm-{NAME}-ctl@{PROJECT}.iam.gserviceaccount.com"


def podmanager(folder, *args, timeout=300):
    return subprocess.run([sys.executable, "-m", "podmanager", *args], cwd=folder, capture_output=True, text=True,
                          timeout=timeout)


def test_a_first_up_in_a_secure_by_default_project_gets_through_with_the_clusters_own_account(tmp_path):
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump({
        "name": NAME, "slices": [{"accelerator": "v4-8"}],
        "simulation": {"create_latency_s": 0.01, "delete_latency_s": 0.01}}))
    up = ("up", "-f", "cluster.yaml", "--dry-run")
    sim = ("sim", "project", "--project", PROJECT)
    assert podmanager(tmp_path, *sim, "--kind", "new").returncode == 0

    # 1. Every API it needs, named at once; nothing made.
    refused = podmanager(tmp_path, *up)
    said = refused.stdout + refused.stderr
    assert refused.returncode == 2, said
    assert f"gcloud services enable {' '.join(APIS)} --project {PROJECT}" in said

    # 2. The APIs on, but the user only Editor: the permissions Editor lacks, each with its grant.
    enable = [arg for api in APIS for arg in ("--enable", api)]
    assert podmanager(tmp_path, *sim, *enable).returncode == 0
    assert podmanager(tmp_path, *sim, "--grant", "roles/editor", "--revoke", "roles/owner", "--member",
                      USER).returncode == 0
    refused = podmanager(tmp_path, *up)
    said = refused.stdout + refused.stderr
    assert refused.returncode == 2, said
    assert "secretmanager.secrets.setIamPolicy (granted by roles/secretmanager.admin)" in said
    assert "secretmanager.versions.access (granted by roles/secretmanager.secretAccessor)" in said
    assert (f"gcloud projects add-iam-policy-binding {PROJECT} --member {USER} --role roles/secretmanager.admin"
            in said)
    with EmulatorControl(launcher.running(PROJECT).address) as control:
        assert control.all_nodes() == [] and control.all_queued_resources() == []
        made = [c for c in control.call("iam_calls") if c["method"] in (
            "iam.projects.serviceAccounts.create", "secretmanager.projects.secrets.create",
            "compute.firewalls.insert", "storage.buckets.setIamPolicy")]
        assert made == []  # nothing created before the permissions were there

    # 3. Owner again: up comes up; the TPU VM runs as the cluster's own account and calls as it.
    assert podmanager(tmp_path, *sim, "--grant", "roles/owner", "--member", USER).returncode == 0
    done = podmanager(tmp_path, *up)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"service account {VMS.split(':')[1]} created" in done.stdout
    with EmulatorControl(launcher.running(PROJECT).address) as control:
        [node] = control.all_nodes()
        assert node.network is not None and node.network.service_account == VMS.split(":")[1]
        calls = control.call("iam_calls")
    by_vms = [c for c in calls if c["principal"] == VMS]
    assert [c["method"] for c in by_vms] == ["secretmanager.projects.secrets.versions.access"]  # its boot's token
    assert all(c["denied"] is None for c in by_vms)
    assert [c for c in calls if c["principal"] == DEFAULT] == []
    assert [c for c in calls if c["denied"]] == []  # every call of this `up` passed IAM as whoever made it

    down = podmanager(tmp_path, "down", "-c", NAME)
    assert down.returncode == 0, down.stdout + down.stderr


def test_a_controller_vm_in_a_secure_by_default_project_runs_as_the_clusters_controller_account(tmp_path):
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump({
        "name": NAME, "controller": {"local": False}, "slices": [{"accelerator": "v4-8"}],
        # The controller VM's insert and delete at a second each: the test is about identities,
        # and Google's 20 s and 30 s are tests/cloud/test_operation_waits.py's and the demo's.
        "simulation": {"create_latency_s": 0.0, "delete_latency_s": 0.0, "instance_create_latency_s": 1.0,
                       "instance_delete_latency_s": 1.0}}))
    sim = ("sim", "project", "--project", PROJECT)
    assert podmanager(tmp_path, *sim, "--kind", "new").returncode == 0
    assert podmanager(tmp_path, *sim, *[arg for api in APIS for arg in ("--enable", api)]).returncode == 0

    done = podmanager(tmp_path, "up", "-f", "cluster.yaml", "--dry-run", timeout=500)
    assert done.returncode == 0, done.stdout + done.stderr
    with EmulatorControl(launcher.running(PROJECT).address) as control:
        [node] = control.all_nodes()
        calls = control.call("iam_calls")
        policy = control.project()
    assert node.network is not None and node.network.service_account == VMS.split(":")[1]
    # On the project the controller's account holds its custom role and no predefined role.
    role_id = f"podmanager.{NAME}.controller"
    assert sorted(role for role, members in policy.bindings.items() if CONTROLLER in members) == [
        f"projects/{PROJECT}/roles/{role_id}"]
    assert sorted(policy.custom_roles[role_id].permissions) == sorted(CONTROLLER_PERMISSIONS)
    by_controller = {c["method"] for c in calls if c["principal"] == CONTROLLER}
    # Every call it made on the project is one the role was made for (the rest: its secrets' and buckets').
    assert {m for m in by_controller if not m.startswith(("secretmanager.", "storage."))} <= set(CONTROLLER_CALLS)
    # The controller VM's `up`: its boot's tokens, the network checked, the slice made and followed.
    assert {"secretmanager.projects.secrets.versions.access", "compute.networks.get",
            "tpu.projects.locations.nodes.create", "tpu.projects.locations.nodes.list"} <= by_controller
    assert {c["method"] for c in calls if c["principal"] == VMS} == {"secretmanager.projects.secrets.versions.access"}
    assert [c for c in calls if c["principal"] == DEFAULT] == []
    assert [c for c in calls if c["denied"]] == []

    down = podmanager(tmp_path, "down", "-c", NAME)
    assert down.returncode == 0, down.stdout + down.stderr
