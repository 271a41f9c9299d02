"""Compute Engine instances that boot (the dry run's controller VM, issue 36): an instance with a
startup script, inserted through podmanager's Compute Engine client on a started emulator, boots as
a simulated VM in a root folder of its own, with a metadata server of its own and a fresh
environment that names the simulated cloud's folder; what its script PUTs as a guest attribute
is read back through the Compute API; a controller crash kills everything it runs and boots it
again on the same disk, as a reset does with its metadata as it is then; a delete kills it and
removes its disk. No Ray: a tiny script."""

from __future__ import annotations

import os
import urllib.request
from pathlib import Path

import psutil
import pytest
from served_emulator import compute_emulator

from podmanager.cloud import errors as cloud_errors
from podmanager.cloud.base import CLUSTER_LABEL
from podmanager.cloud.gcp.compute import ComputeNetworks
from podmanager.cloud.gcp.controller_vm import (
    create_controller_vm,
    delete_controller_vm,
)
from podmanager.cloud.gcp.instances import ComputeInstances
from podmanager.cloud.instances import CONTROLLER_ROLE, ROLE_LABEL, Instance
from podmanager.core.clock import poll_until
from podmanager.core.spec import parse_spec
from podmanager.emulator import instance_vms
from podmanager.emulator.control import EmulatorControl
from podmanager.emulator.server import Emulator
from podmanager.vm import procs

PROJECT = "p-vms"
ZONE = "sim-zone-a"
# Counts its boots on its disk, leaves its environment there, starts a process of its own machine
# (as a controller starts its Ray head), reports through its metadata server, and stays up.
SCRIPT = """#!/bin/bash
set -eu
M="$PODMANAGER_METADATA_URL"
boots=$(( $(cat "$PODMANAGER_ROOT/root/boots" 2>/dev/null || echo 0) + 1 ))
echo "$boots" > "$PODMANAGER_ROOT/root/boots"
env > "$PODMANAGER_ROOT/root/env"
PODMANAGER_MACHINE_ID=a-head-of-its-own sleep 300 &
echo $! > "$PODMANAGER_ROOT/root/head.pid"
name=$(curl -fsS -H "Metadata-Flavor: Google" "$M/instance/name")
curl -fsS -X PUT -H "Metadata-Flavor: Google" --data-binary "$name-$boots" \
  "$M/instance/guest-attributes/podmanager/booted"
exec sleep 300
"""


@pytest.fixture
def sim_home(tmp_path, monkeypatch):
    path = tmp_path / "cloud"
    monkeypatch.setenv("PODMANAGER_SIM_HOME", str(path))
    yield path
    procs.remove_vms_folder("c")  # what `down` removes: the cluster's VMs' folder, empty once they went


@pytest.fixture
def emulator(sim_home):
    with compute_emulator(PROJECT, grpc=True) as served:
        yield served


@pytest.fixture
def instances(emulator):
    with ComputeInstances(PROJECT, endpoint=f"http://127.0.0.1:{emulator.rest_port}", retry_deadline_s=5,
                          retry_initial_s=0.05, poll_interval_s=0.05) as client:
        yield client


def controller(name="c-controller", script=SCRIPT):
    # Guest attributes on, as Google requires for the script's PUT (the controller VM `up` makes sets it too).
    metadata = {"startup-script": script, "enable-guest-attributes": "TRUE"} if script else {}
    return Instance(name=name, zone=ZONE, machine_type="e2-standard-2", metadata=metadata,
                    labels={CLUSTER_LABEL: "c", ROLE_LABEL: CONTROLLER_ROLE})


def booted(instances, expected, name="c-controller"):
    return poll_until(lambda: instances.guest_attributes(ZONE, name).get("booted") == expected or None,
                      timeout_s=30, interval_s=0.05, what=f"the VM's guest attribute booted={expected}")


def record(name="c-controller"):
    return procs.read_record(instance_vms.record_path(PROJECT, ZONE, name))


def environment(root):
    return dict(line.split("=", 1) for line in (Path(root) / "root/env").read_text().splitlines() if "=" in line)


def test_an_instance_without_attributes_reads_as_empty(instances):
    instances.create(controller("quiet", script=None), timeout_s=30)
    assert instances.guest_attributes(ZONE, "quiet") == {}  # the API's 404 for a query path with nothing
    assert instances.guest_attributes(ZONE, "no-such-vm") == {}
    assert record("quiet") is None  # nothing to boot: no VM


def test_an_instance_boots_reports_crashes_back_and_goes(emulator, instances, sim_home, podmanager_home):
    instances.create(controller(), timeout_s=30)
    booted(instances, "c-controller-1")

    first = record()
    root = Path(first["temp_dir"])
    assert instance_vms.record_path(PROJECT, ZONE, "c-controller").is_relative_to(sim_home)
    assert sorted(p.name for p in root.iterdir()) == ["etc", "opt", "root", "tmp", "usr", "var"]
    env = environment(root)
    assert env["PODMANAGER_SIM_HOME"] == str(sim_home)  # it finds the project's emulator and hosts
    assert env.get("PODMANAGER_HOME") != str(podmanager_home)  # but nothing of whoever started it
    assert env["PODMANAGER_ROOT"] == str(root) and env["TMPDIR"] == str(root / "tmp")
    assert env[procs.OWNER_ENV] == procs.sim_owner("c")
    assert procs.alive(first["machine_id"])
    head = int((root / "root/head.pid").read_text())

    with EmulatorControl(f"127.0.0.1:{emulator.grpc_port}") as control:
        assert control.crash_controller_vm("other") is None
        assert control.crash_controller_vm("c") == "c-controller"
    booted(instances, "c-controller-2")  # its startup script ran again, on the same disk
    again = record()
    assert again["temp_dir"] == str(root) and again["metadata_port"] == first["metadata_port"]
    assert (root / "root/boots").read_text().strip() == "2"
    assert not procs.alive(first["machine_id"])
    assert not psutil.pid_exists(head) or psutil.Process(head).status() == psutil.STATUS_ZOMBIE

    instances.delete(ZONE, "c-controller", timeout_s=30)
    poll_until(lambda: not procs.alive(again["machine_id"]) and not root.exists() and record() is None,
               timeout_s=30, interval_s=0.05, what="the deleted VM's processes, disk and record gone")
    assert not [p for p in procs.inside(str(root)) if p.pid != os.getpid()]


def metadata_name(port):
    request = urllib.request.Request(f"http://127.0.0.1:{port}/computeMetadata/v1/instance/name",
                                     headers={"Metadata-Flavor": "Google"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.read().decode()


def test_a_restarted_emulator_serves_a_running_vm_its_metadata_again(sim_home):
    first = Emulator(PROJECT, persist=True)
    first.serve_rest()
    first.start()
    try:
        with ComputeInstances(PROJECT, endpoint=f"http://127.0.0.1:{first.rest_port}", retry_deadline_s=5,
                              retry_initial_s=0.05, poll_interval_s=0.05) as instances:
            instances.create(controller(), timeout_s=30)
            booted(instances, "c-controller-1")
    finally:
        first.stop()  # a saved project: its VMs outlive the emulator, as they outlive a killed one
    running = record()
    assert procs.alive(running["machine_id"])

    second = Emulator(PROJECT, persist=True)
    second.serve_rest()
    second.start()
    try:
        assert metadata_name(running["metadata_port"]) == "c-controller"  # on the port the VM knows
        assert record()["machine_id"] == running["machine_id"]  # the same VM, not booted again
        with ComputeInstances(PROJECT, endpoint=f"http://127.0.0.1:{second.rest_port}", retry_deadline_s=5,
                              retry_initial_s=0.05, poll_interval_s=0.05) as instances:
            instances.delete(ZONE, "c-controller", timeout_s=30)
        poll_until(lambda: not procs.alive(running["machine_id"]), timeout_s=30, interval_s=0.05,
                   what="the deleted VM's processes gone")
    finally:
        second.stop()


def test_the_controller_vm_up_makes_may_report_its_boot(emulator, instances):
    """Google drops guest attributes unless the VM's metadata turns them on: the VM
    `create_controller_vm` makes reports its boot (without the key, the PUT is a 403)."""
    cluster_spec = parse_spec({"name": "c", "slices": [{"accelerator": "v4-8"}], "zones": [ZONE]}, dry_run=True)
    with ComputeNetworks(PROJECT, endpoint=f"http://127.0.0.1:{emulator.rest_port}", retry_deadline_s=5,
                         retry_initial_s=0.05, poll_interval_s=0.05) as networks:
        create_controller_vm(cluster_spec, instances=instances, networks=networks, caller="203.0.113.7/32",
                             port=8443, startup_script=SCRIPT, timeout_s=30)
        try:
            booted(instances, "c-controller-1")
        finally:
            delete_controller_vm(cluster_spec, instances=instances, networks=networks, timeout_s=30)


@pytest.mark.parametrize("state, restart", [("TERMINATED", "start"), ("SUSPENDED", "resume")])
def test_a_stopped_controller_vm_ends_keeps_its_disk_and_boots_again_when_started(emulator, instances, state, restart):
    instances.create(controller(), timeout_s=30)
    booted(instances, "c-controller-1")
    first = record()
    with EmulatorControl(f"127.0.0.1:{emulator.grpc_port}") as control:
        assert control.halt_controller_vm("other", state) is None
        assert control.halt_controller_vm("c", state) == "c-controller"
    assert instances.get(ZONE, "c-controller").status == state
    poll_until(lambda: not procs.alive(first["machine_id"]), timeout_s=30, interval_s=0.05,
               what="the stopped VM's processes gone")
    assert Path(first["temp_dir"], "root/boots").read_text().strip() == "1"  # its disk kept
    getattr(instances, restart)(ZONE, "c-controller", timeout_s=30)
    booted(instances, "c-controller-2")  # the same disk: its counter went on
    assert record()["temp_dir"] == first["temp_dir"]
    instances.delete(ZONE, "c-controller", timeout_s=30)


def test_a_reset_boots_the_vm_again_on_its_disk_with_the_metadata_as_it_is_now(instances):
    """instances.reset (https://cloud.google.com/compute/docs/instances/reset-instance): the VM
    stays RUNNING, every process of it is killed, and its startup script, as setMetadata left
    it, runs again on the same root folder: how `up` upgrades the controller VM in place."""
    instances.create(controller(), timeout_s=30)
    booted(instances, "c-controller-1")
    first = record()
    head = int(Path(first["temp_dir"], "root/head.pid").read_text())
    there = instances.get(ZONE, "c-controller")
    newer = SCRIPT.replace('"$name-$boots"', '"$name-$boots-newer"')
    instances.set_metadata(there, {**there.metadata, "startup-script": newer}, timeout_s=30)
    instances.reset(ZONE, "c-controller", timeout_s=30)
    booted(instances, "c-controller-2-newer")  # the new script, on the disk that counted one boot
    assert record()["temp_dir"] == first["temp_dir"] and record()["boots"] == 2
    assert instances.get(ZONE, "c-controller").status == "RUNNING"
    assert not procs.alive(first["machine_id"])
    assert not psutil.pid_exists(head) or psutil.Process(head).status() == psutil.STATUS_ZOMBIE
    # One boot running, not the old one beside the new: every process of its disk is the new machine's
    # (its guest, its lease holder) or the head the new boot started.
    assert set(procs.machines()) & {first["machine_id"], record()["machine_id"]} == {record()["machine_id"]}
    assert len(procs.members(record()["machine_id"])) == 2
    instances.delete(ZONE, "c-controller", timeout_s=30)


def test_google_refuses_a_stale_metadata_fingerprint_a_reset_of_a_stopped_vm_and_a_smaller_disk(instances):
    """The rules of the calls an in-place change of the controller VM makes (`rulebook.py`, each
    with its page): setMetadata needs the current fingerprint (412), reset a RUNNING instance,
    setMachineType a TERMINATED one and a type its zone offers, and disks.resize a larger size."""
    instances.create(controller("quiet", script=None), timeout_s=30)
    read = instances.get(ZONE, "quiet")
    assert read.disk == "quiet" and read.metadata_fingerprint
    instances.set_metadata(read, {"a": "1"}, timeout_s=30)
    with pytest.raises(cloud_errors.InvalidRequestError, match="fingerprint"):
        instances.set_metadata(read, {"a": "2"}, timeout_s=30)  # read before the first change: stale
    assert instances.get(ZONE, "quiet").metadata == {"a": "1"}

    with pytest.raises(cloud_errors.InvalidRequestError, match="TERMINATED"):
        instances.set_machine_type(ZONE, "quiet", "e2-standard-8", timeout_s=30)  # while it runs
    with pytest.raises(cloud_errors.InvalidRequestError, match="quiet"):
        instances.resize_disk(ZONE, "quiet", 10, timeout_s=30)  # its size: not larger
    instances.resize_disk(ZONE, "quiet", 20, timeout_s=30)
    with pytest.raises(cloud_errors.InvalidRequestError, match="can only grow"):
        instances.resize_disk(ZONE, "quiet", 15, timeout_s=30)
    instances.stop(ZONE, "quiet", timeout_s=30)
    with pytest.raises(cloud_errors.InvalidRequestError, match="RUNNING"):
        instances.reset(ZONE, "quiet", timeout_s=30)
    with pytest.raises(cloud_errors.InvalidRequestError, match="does not exist in zone"):
        instances.set_machine_type(ZONE, "quiet", "e2-enormous-999", timeout_s=30)
    instances.set_machine_type(ZONE, "quiet", "e2-standard-8", timeout_s=30)
    after = instances.get(ZONE, "quiet")
    assert (after.machine_type, after.disk_gb, after.status) == ("e2-standard-8", 20, "TERMINATED")
    instances.delete(ZONE, "quiet", timeout_s=30)
