"""`podmanager sim controller-crash -c CLUSTER`: the dry-run cluster's controller VM (a Compute
Engine instance the project's emulator booted) is killed and boots again from its disk; a cluster
with none is refused with exit 2, naming the flag."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from podmanager.cli import app
from podmanager.cloud.base import CLUSTER_LABEL
from podmanager.cloud.gcp.instances import ComputeInstances
from podmanager.cloud.instances import CONTROLLER_ROLE, ROLE_LABEL, Instance
from podmanager.core.clock import poll_until
from podmanager.emulator import launcher
from podmanager.vm import procs

SPEC = """
name: crashme
slices:
  - accelerator: v4-8
simulation:
  create_latency_s: 0.01
  delete_latency_s: 0.01
  instance_create_latency_s: 0.3  # the crash is the point, not Google's 20 s and 30 s
  instance_delete_latency_s: 0.3
  boot_hosts: false
"""
ZONE = "sim-zone-a"
SCRIPT = """#!/bin/bash
boots=$(( $(cat "$PODMANAGER_ROOT/root/boots" 2>/dev/null || echo 0) + 1 ))
echo "$boots" > "$PODMANAGER_ROOT/root/boots"
curl -fsS -X PUT -H "Metadata-Flavor: Google" --data-binary "$boots" \
  "$PODMANAGER_METADATA_URL/instance/guest-attributes/podmanager/boots"
exec sleep 300
"""


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args], prog_name="podmanager")


@pytest.fixture
def cluster(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC)
    assert invoke("up", "-f", path, "--dry-run").exit_code == 0
    yield "crashme"
    invoke("down", "-c", "crashme")


def test_controller_crash_reboots_the_controller_vm_and_refuses_a_cluster_without_one(cluster):
    refused = invoke("sim", "controller-crash", "-c", cluster)
    assert refused.exit_code == 2, refused.output
    assert "--cluster: crashme has no controller VM" in refused.output

    project = "podmanager-sim"
    found = launcher.running(project)
    with ComputeInstances(project, endpoint=found.compute_api, retry_deadline_s=5, retry_initial_s=0.05,
                          poll_interval_s=0.05) as instances:
        instances.create(Instance(name=f"{cluster}-controller", zone=ZONE, machine_type="e2-standard-2",
                                  metadata={"startup-script": SCRIPT, "enable-guest-attributes": "TRUE"},
                                  labels={CLUSTER_LABEL: cluster, ROLE_LABEL: CONTROLLER_ROLE}), timeout_s=30)
        try:
            def boots(expected):
                return poll_until(
                    lambda: instances.guest_attributes(ZONE, f"{cluster}-controller").get("boots") == expected or None,
                    timeout_s=30, interval_s=0.05, what=f"boot {expected} of the controller VM")

            boots("1")
            crashed = invoke("sim", "controller-crash", "-c", cluster)
            assert crashed.exit_code == 0, crashed.output
            assert "killed the controller VM crashme-controller" in crashed.output
            boots("2")  # the same disk: its counter survived the crash
            assert "simulated crash of the controller VM" in invoke("events", "-c", cluster).output
        finally:
            instances.delete(ZONE, f"{cluster}-controller", timeout_s=30)
            poll_until(lambda: not procs.owned(procs.sim_owner(cluster)), timeout_s=30, interval_s=0.05,
                       what="the deleted controller VM's processes gone")
