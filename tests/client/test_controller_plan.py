"""`up` of a cluster whose controller is a VM plans the VM as it plans the slices: it says
whether it creates the VM or keeps the one there, and refuses (exit 2, nothing changed) a VM
that differs from what it would make now, naming each field: a replacement would lose the
state on its boot disk. The pure plan, then `up` against a dry run's Compute Engine (no Ray:
the VM there is made directly, with a startup script that serves nothing)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from podmanager.client import pinned
from podmanager.client.controller_machine import ControllerMachine
from podmanager.client.controller_plan import drift, plan_controller
from podmanager.client.remote_up_down import RemoteSpec
from podmanager.cloud.gcp.controller_vm import (
    change_controller_vm,
    create_controller_vm,
    delete_controller_vm,
    find_controller_vm,
)
from podmanager.cloud.instances import Instance
from podmanager.cluster import backends
from podmanager.core.clock import poll_until
from podmanager.core.errors import SpecError
from podmanager.core.events import EventKind
from podmanager.core.records import Versions
from podmanager.core.spec import parse_spec
from podmanager.emulator import instance_vms, launcher
from podmanager.emulator.control import EmulatorControl
from podmanager.vm import procs

WANTED = Versions(python="3.11.7", ray="2.40.0", jax="0.4.35", podmanager="0.1.0+hbbbb")


def spec(**controller):
    return parse_spec({"name": "lap", "slices": [{"accelerator": "v4-8"}], "simulation": {"boot_hosts": False, "instance_create_latency_s": 0.5, "instance_delete_latency_s": 0.5},
                       "controller": {"local": False, **controller}}, dry_run=True)


def vm(**fields) -> Instance:
    return Instance(**{"name": "lap-controller", "zone": "sim-zone-a", "machine_type": "e2-standard-4",
                       "disk_gb": 50, "status": "RUNNING", **fields})


def test_a_controller_vm_like_the_spec_is_kept_and_none_is_created():
    kept = plan_controller(spec(), "lap-controller", vm(), WANTED, WANTED, "sim-zone-a")
    assert kept.kind == "keep"
    assert kept.describe() == "keep the controller VM lap-controller (e2-standard-4, 50 GB, in sim-zone-a, RUNNING)"
    made = plan_controller(spec(), "lap-controller", None, None, WANTED, "sim-zone-b")
    assert made.describe() == "create the controller VM lap-controller (e2-standard-4, 50 GB, in sim-zone-b)"
    tpu_region = parse_spec({"name": "lap", "project": "p-123456", "zones": ["us-central2-b"],
                             "slices": [{"accelerator": "v4-8"}], "controller": {"local": False}})
    assert plan_controller(tpu_region, "lap-controller", None, None, WANTED, "us-central1-a").describe() == (
        "create the controller VM lap-controller (e2-standard-4, 50 GB, in us-central1-a): no zone of us-central2 "
        "offers e2-standard-4; the nearest that does")
    # A VM that reported no versions yet (still booting) is not judged by them.
    assert drift(spec(), vm(), None, WANTED) == []


OLDER = Versions(python="3.11.7", ray="2.40.0", jax="0.4.35", podmanager="0.1.0+haaaa")
SOFTWARE = ("the podmanager (Python, Ray, JAX) running here: the VM runs other software than up would install now "
            "(podmanager 0.1.0+haaaa there, 0.1.0+hbbbb here)")


@pytest.mark.parametrize("controller, running, kind, machine_type, disk_gb, software, differs, steps", [
    ({}, OLDER, "upgrade", "", 0, True, [SOFTWARE],
     "replace its startup script, reset it; its boot installs the new software and starts the controller again"),
    ({"machine_type": "e2-standard-8"}, WANTED, "resize", "e2-standard-8", 0, False,
     ["controller.machine_type: the VM is e2-standard-4, the spec asks for e2-standard-8"],
     "replace its startup script, stop it, set its machine type to e2-standard-8, start it; its boot starts the "
     "controller again"),
    ({"disk_gb": 100}, WANTED, "resize", "", 100, False,
     ["controller.disk_gb: the VM's disk is 50 GB, the spec asks for 100"],
     "replace its startup script, grow its disk to 100 GB, reset it; its boot starts the controller again"),
    ({"machine_type": "e2-standard-8", "disk_gb": 100}, OLDER, "resize", "e2-standard-8", 100, True,
     ["controller.machine_type: the VM is e2-standard-4, the spec asks for e2-standard-8",
      "controller.disk_gb: the VM's disk is 50 GB, the spec asks for 100", SOFTWARE],
     "replace its startup script, grow its disk to 100 GB, stop it, set its machine type to e2-standard-8, start "
     "it; its boot installs the new software and starts the controller again"),
])
def test_a_vm_that_differs_is_planned_to_change_in_place_saying_what_differs_and_what_up_does(
        controller, running, kind, machine_type, disk_gb, software, differs, steps):
    plan = plan_controller(spec(**controller), "lap-controller", vm(), running, WANTED, "sim-zone-a",
                           ("r-1 (running)",))
    assert (plan.kind, plan.new_machine_type, plan.new_disk_gb, plan.new_software) == (
        kind, machine_type, disk_gb, software)
    assert list(plan.differs) == differs and plan.steps() == steps
    assert plan.describe().splitlines() == [
        f"{kind} the controller VM lap-controller (e2-standard-4, 50 GB, in sim-zone-a, RUNNING), in place: its boot "
        "disk and the state on it are kept", *(f"  {line}" for line in differs), f"  up will: {steps}",
        "  runs going on, which pause for the reboot and resume after it: r-1 (running)"]
    # A stopped VM is started, not reset (nor stopped again); a suspended one resumed first.
    stopped = plan_controller(spec(**controller), "lap-controller", vm(status="TERMINATED"), running, WANTED,
                              "sim-zone-a")
    assert "reset it" not in stopped.steps() and "stop it" not in stopped.steps() and "start it" in stopped.steps()
    suspended = plan_controller(spec(**controller), "lap-controller", vm(status="SUSPENDED"), running, WANTED,
                                "sim-zone-a")
    assert suspended.steps().startswith("resume it, replace its startup script")
    # A controller that did not answer: its runs are said to be not known.
    unknown = plan_controller(spec(**controller), "lap-controller", vm(), running, WANTED, "sim-zone-a", None)
    assert unknown.describe().endswith("runs going on: not known (the controller does not answer); any pause for "
                                       "the reboot and resume")


@pytest.mark.parametrize("controller, field", [
    ({"zone": "sim-zone-b"}, "controller.zone: the VM is in sim-zone-a, the spec asks for sim-zone-b"),
    ({"disk_gb": 20}, "controller.disk_gb: the VM's disk is 50 GB, the spec asks for 20, and Google Cloud shrinks "
                      "no disk"),
])
def test_what_cannot_change_in_place_is_named_by_its_field_and_refused_with_exit_2(controller, field):
    with pytest.raises(SpecError) as refused:
        plan_controller(spec(**controller), "lap-controller", vm(), OLDER, WANTED, "sim-zone-a")
    assert refused.value.exit_code == 2
    assert field in [line.strip() for line in refused.value.message.splitlines()[1:]]
    assert "podmanager down -c lap" in refused.value.hint and "boot disk" in refused.value.hint


@pytest.fixture
def made_controller() -> Iterator[Instance]:
    """The cluster's controller VM in the dry run's Compute Engine, as an earlier `up` made it;
    deleted after the test (its simulated VM lives while its record does)."""
    with backends.make_instances(spec()) as instances, backends.make_networks(spec()) as networks:
        yield create_controller_vm(spec(), instances=instances, networks=networks, caller="127.0.0.1/32",
                                   port=8443, startup_script="#!/bin/bash\n", timeout_s=30)
        delete_controller_vm(spec(), instances=instances, networks=networks, timeout_s=30)


def test_up_refuses_a_controller_vm_in_another_zone_changing_nothing_and_keeps_one_like_the_spec(made_controller):
    before = made_controller
    said: list[tuple[str, str]] = []
    edited = spec(zone="sim-zone-b")
    with pytest.raises(SpecError) as refused:
        RemoteSpec(edited, {"name": "lap"}).up(timeout_s=5, on_event=lambda e: said.append((e.kind, e.message)))
    assert refused.value.exit_code == 2
    assert "controller.zone: the VM is in sim-zone-a, the spec asks for sim-zone-b" in refused.value.message
    assert not any(kind in (EventKind.CONTROLLER_CREATING, EventKind.CONTROLLER_CHANGING) for kind, _ in said)
    with backends.make_instances(edited) as instances:
        assert find_controller_vm(edited, instances) == before
    assert pinned.load_spec_json("lap") is None  # the pointer is not moved to the refused spec

    said.clear()
    plan = ControllerMachine(spec(), lambda kind, message: said.append((kind, message))).plan()
    assert plan.kind == "keep"
    assert said == [(EventKind.CONTROLLER_PLAN, "plan for the controller: keep the controller VM lap-controller "
                                                "(e2-standard-4, 50 GB, in sim-zone-a, RUNNING)")]


WATCHED = ("compute.disks.resize", "compute.instances.setMetadata", "compute.instances.stop",
           "compute.instances.setMachineType", "compute.instances.start", "compute.instances.reset",
           "compute.instances.delete", "compute.instances.insert")


def test_another_machine_type_and_a_larger_disk_are_set_in_place_on_the_same_disk(made_controller):
    """The old code refused this plan (exit 2); now the VM is stopped, changed and started again
    on its own disk (its simulated root folder), its startup script replaced."""
    edited = spec(machine_type="e2-standard-8", disk_gb=60)
    said: list[tuple[str, str]] = []
    plan = ControllerMachine(edited, lambda kind, message: said.append((kind, message))).plan()
    assert (plan.kind, plan.new_machine_type, plan.new_disk_gb) == ("resize", "e2-standard-8", 60)
    assert plan.going_on is None  # no pointer here to ask the controller with: not known
    assert "stop it, set its machine type to e2-standard-8, start it" in said[0][1]
    where = instance_vms.record_path(edited.project, made_controller.zone, made_controller.name)
    disk = poll_until(lambda: (procs.read_record(where) or {}).get("temp_dir"), timeout_s=30, interval_s=0.05,
                      what="the controller VM's simulated disk")
    with EmulatorControl(launcher.ensure(edited.project or "")) as control:
        before = len(control.requests(*WATCHED))
    with backends.make_instances(edited) as instances, backends.make_networks(edited) as networks:
        changed = change_controller_vm(edited, instances=instances, networks=networks, caller="127.0.0.1/32",
                                       port=8443, startup_script="#!/bin/bash\necho two\n",
                                       machine_type=plan.new_machine_type, disk_gb=plan.new_disk_gb, timeout_s=30)
        assert (changed.machine_type, changed.disk_gb, changed.status) == ("e2-standard-8", 60, "RUNNING")
        assert changed.metadata["startup-script"] == "#!/bin/bash\necho two\n"
    with EmulatorControl(launcher.ensure(edited.project or "")) as control:
        changes = [call["method"] for call in control.requests(*WATCHED)[before:]]
    assert changes == list(WATCHED[:5])  # in this order, each once; neither deleted nor made anew
    assert procs.read_record(where)["temp_dir"] == disk and procs.read_record(where)["boots"] == 2
