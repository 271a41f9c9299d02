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
    create_controller_vm,
    delete_controller_vm,
    find_controller_vm,
)
from podmanager.cloud.instances import Instance
from podmanager.cluster import backends
from podmanager.controller.software import Versions
from podmanager.core.errors import SpecError
from podmanager.core.events import EventKind
from podmanager.core.spec import parse_spec

WANTED = Versions(python="3.11.7", ray="2.40.0", jax="0.4.35", podmanager="0.1.0+hbbbb")


def spec(**controller):
    return parse_spec({"name": "lap", "slices": [{"accelerator": "v4-8"}], "simulation": {"boot_hosts": False},
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


@pytest.mark.parametrize("controller, existing, running, field", [
    ({"machine_type": "e2-standard-8"}, {}, WANTED, "controller.machine_type: the VM is e2-standard-4, the spec "
                                                    "asks for e2-standard-8"),
    ({"disk_gb": 100}, {}, WANTED, "controller.disk_gb: the VM's disk is 50 GB, the spec asks for 100"),
    ({"zone": "sim-zone-b"}, {}, WANTED, "controller.zone: the VM is in sim-zone-a, the spec asks for sim-zone-b"),
    ({}, {}, Versions(python="3.11.7", ray="2.40.0", jax="0.4.35", podmanager="0.1.0+haaaa"),
     "the podmanager (Python, Ray, JAX) running here: the VM runs other software than up would install now "
     "(podmanager 0.1.0+haaaa there, 0.1.0+hbbbb here)"),
])
def test_each_difference_is_named_by_its_field_and_refused_with_exit_2(controller, existing, running, field):
    with pytest.raises(SpecError) as refused:
        plan_controller(spec(**controller), "lap-controller", vm(**existing), running, WANTED, "sim-zone-a")
    assert refused.value.exit_code == 2
    assert field in refused.value.message.splitlines()[1:][0]
    assert "podmanager down -c lap" in refused.value.hint and "boot disk" in refused.value.hint


@pytest.fixture
def made_controller() -> Iterator[Instance]:
    """The cluster's controller VM in the dry run's Compute Engine, as an earlier `up` made it;
    deleted after the test (its simulated VM lives while its record does)."""
    with backends.make_instances(spec()) as instances, backends.make_networks(spec()) as networks:
        yield create_controller_vm(spec(), instances=instances, networks=networks, caller="127.0.0.1/32",
                                   port=8443, startup_script="#!/bin/bash\n", timeout_s=30)
        delete_controller_vm(spec(), instances=instances, networks=networks, timeout_s=30)


def test_up_refuses_a_controller_vm_of_another_machine_type_changing_nothing_and_keeps_one_like_the_spec(
        made_controller):
    before = made_controller
    said: list[tuple[str, str]] = []
    edited = spec(machine_type="e2-standard-8")
    with pytest.raises(SpecError) as refused:
        RemoteSpec(edited, {"name": "lap"}).up(timeout_s=5, on_event=lambda e: said.append((e.kind, e.message)))
    assert refused.value.exit_code == 2
    assert "controller.machine_type: the VM is e2-standard-4, the spec asks for e2-standard-8" in refused.value.message
    assert not any(kind == EventKind.CONTROLLER_CREATING for kind, _ in said)  # the old code said it, and kept the VM
    with backends.make_instances(edited) as instances:
        assert find_controller_vm(edited, instances) == before
    assert pinned.load_spec_json("lap") is None  # the pointer is not moved to the refused spec

    said.clear()
    plan = ControllerMachine(spec(), lambda kind, message: said.append((kind, message))).plan()
    assert plan.kind == "keep"
    assert said == [(EventKind.CONTROLLER_PLAN, "plan for the controller: keep the controller VM lap-controller "
                                                "(e2-standard-4, 50 GB, in sim-zone-a, RUNNING)")]
