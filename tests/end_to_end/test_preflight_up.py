"""`up` and `down` of a dry run with the network preflight: the project's emulator (a process
of its own) starts as a new project, a default spec passes, the emulator's request log shows
the cluster's firewall rule created by `up` and deleted by `down`, and a spec without external
IPs exits 2 from the command line naming Cloud NAT and Private Google Access, with nothing
created. Control plane only (`simulation.boot_hosts: false`): no Ray."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from podmanager.api import Cluster, simulation
from podmanager.emulator import launcher
from podmanager.emulator.control import EmulatorControl

pytestmark = pytest.mark.timeout(180)
NO_HOSTS = {"boot_hosts": False, "create_latency_s": 0.01, "delete_latency_s": 0.01}
PROJECT = "podmanager-sim"


def spec(name, **extra):
    return {"name": name, "slices": [{"accelerator": "v4-8"}], "simulation": NO_HOSTS, **extra}


def firewall_calls(control, verb):
    return [call["request"] for call in control.requests(f"compute.firewalls.{verb}")]


def test_up_makes_the_clusters_rule_and_tags_its_nodes_and_down_deletes_it():
    keep = Cluster.from_dict(spec("keep"), dry_run=True)  # holds the emulator up after the other's down
    keep.up()
    cluster = Cluster.from_dict(spec("net"), dry_run=True)
    cluster.up()
    with EmulatorControl(launcher.running(PROJECT).address) as control:
        inserted = {r["body"]["name"]: r["body"] for r in firewall_calls(control, "insert")}
        assert inserted["pm-net-internal"]["sourceTags"] == ["pm-net"]
        assert inserted["pm-net-internal"]["targetTags"] == ["pm-net"]
        [node] = [n for n in control.all_nodes() if n.name == "net-s0"]
        assert node.network is not None and "pm-net" in node.network.tags  # what the rule lets in
        assert node.network.enable_external_ips  # the default: a new project has no NAT
        assert node.network.scopes == ("https://www.googleapis.com/auth/cloud-platform",)
        assert any(e.kind == "firewall_created" for e in cluster.store.events("net"))

        cluster.down()
        assert [r["firewall"] for r in firewall_calls(control, "delete")] == ["pm-net-internal"]
    keep.down()


def test_up_from_the_command_line_without_external_ips_exits_2_and_creates_nothing(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(spec("private", network={"enable_external_ips": False})))

    finished = subprocess.run([sys.executable, "-m", "podmanager", "up", "-f", str(path), "--dry-run"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=150)

    said = finished.stdout + finished.stderr
    assert finished.returncode == 2, said
    assert "Cloud NAT" in said and "Private Google Access" in said and "enable_external_ips" in said
    with EmulatorControl(launcher.running(PROJECT).address) as control:
        assert control.all_nodes() == [] and control.all_queued_resources() == []
        assert control.requests("CreateNode", "CreateQueuedResource", "compute.firewalls.insert") == []


def test_up_with_a_checkpoint_bucket_that_does_not_exist_exits_2_naming_it_and_creates_nothing(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(spec("nobucket", checkpoints="gs://no-such-ckpt/runs")))

    finished = subprocess.run([sys.executable, "-m", "podmanager", "up", "-f", str(path), "--dry-run"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=150)

    said = finished.stdout + finished.stderr
    assert finished.returncode == 2, said
    assert "checkpoints: bucket no-such-ckpt does not exist" in said and "gcloud storage buckets create" in said
    with EmulatorControl(launcher.running(PROJECT).address) as control:
        assert [n for n in control.all_nodes() if n.cluster == "nobucket"] == []
        assert control.requests("CreateNode", "CreateQueuedResource", "compute.firewalls.insert") == []


def test_up_in_a_new_secure_by_default_project_exits_2_naming_every_disabled_api_and_creates_nothing(tmp_path):
    # A new project of a secure-by-default organization has neither Cloud TPU nor Compute Engine on,
    # nor Resource Manager (the permissions asked) and IAM (the cluster's own account made).
    simulation.change_project(PROJECT, kind="new")
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(spec("fresh")))

    finished = subprocess.run([sys.executable, "-m", "podmanager", "up", "-f", str(path), "--dry-run"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=150)

    said = finished.stdout + finished.stderr
    assert finished.returncode == 2, said
    assert "SERVICE_DISABLED" in said
    apis = ("tpu.googleapis.com", "compute.googleapis.com", "cloudresourcemanager.googleapis.com", "iam.googleapis.com")
    for service in apis:  # all at once, each with its link
        assert f"https://console.developers.google.com/apis/api/{service}/overview?project=" in said
    assert f"gcloud services enable {' '.join(apis)} --project podmanager-sim" in said
    with EmulatorControl(launcher.running(PROJECT).address) as control:
        assert control.all_nodes() == [] and control.all_queued_resources() == []
        assert control.requests("CreateNode", "CreateQueuedResource", "compute.firewalls.insert") == []
