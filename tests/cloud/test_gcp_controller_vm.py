"""The cluster's controller VM (issue 36, not wired into `up` yet), made through
podmanager's Compute Engine client (plain JSON; google-cloud-compute's own reads what was made) against the emulator's Compute Engine (served in-process, no
Ray): the VM with podmanager's labels, the spec's machine type, zone and disk, the cloud-platform
scope and the startup script; the channel's rule admitting the caller's one address; idempotent
create and delete; a bad machine type or zone refused naming its field, with nothing created."""

from __future__ import annotations

import json

import pytest
from google.api_core import exceptions as google_exceptions
from google.api_core.client_options import ClientOptions
from google.cloud import compute_v1
from served_emulator import compute_emulator

from podmanager.cloud.gcp import emulator_identity
from podmanager.cloud.gcp.compute import ComputeNetworks
from podmanager.cloud.gcp.controller_vm import (
    ControllerVmDeleted,
    channel_rule,
    controller_instance,
    create_controller_vm,
    delete_controller_vm,
    find_controller_vm,
    nearest_zones,
)
from podmanager.cloud.gcp.instances import ComputeInstances, instance_body
from podmanager.core.clock import poll_until
from podmanager.core.errors import SpecError
from podmanager.core.network_names import cluster_tag
from podmanager.core.spec import CLOUD_PLATFORM_SCOPE, parse_spec

PROJECT = "podmanager-sim"
CALLER = "203.0.113.7/32"
PORT = 8443
SCRIPT = "#!/bin/bash\necho controller\n"


@pytest.fixture
def emulator():
    with compute_emulator(PROJECT) as served:
        yield served


@pytest.fixture
def clients(emulator):
    timing = {"endpoint": f"http://127.0.0.1:{emulator.rest_port}", "retry_deadline_s": 5, "retry_initial_s": 0.05,
              "poll_interval_s": 0.05}
    with ComputeInstances(PROJECT, **timing) as instances, ComputeNetworks(PROJECT, **timing) as networks:
        yield {"instances": instances, "networks": networks}


def spec(zones=None, **controller):
    return parse_spec({"name": "c", "slices": [{"accelerator": "v4-8"}], **({"zones": zones} if zones else {}),
                       **({"controller": controller} if controller else {})}, dry_run=True)


def raw(kind, emulator):
    """google-cloud-compute's own client on the emulator: what the project holds, read independently."""
    return kind(credentials=emulator_identity.credentials(),  # the user's simulated credentials
                client_options=ClientOptions(api_endpoint=f"http://127.0.0.1:{emulator.rest_port}"))


def listed_instances(emulator):
    return [vm for _, scoped in raw(compute_v1.InstancesClient, emulator).aggregated_list(project=PROJECT)
            for vm in scoped.instances]


def channel_rules(emulator):
    return [r for r in raw(compute_v1.FirewallsClient, emulator).list(project=PROJECT) if r.name == "pm-c-channel"]


def changes(emulator):
    return [name for name, _ in emulator.api.requests if name.endswith((".insert", ".delete"))]


def create(cluster_spec, clients, caller=CALLER):
    return create_controller_vm(cluster_spec, caller=caller, port=PORT, startup_script=SCRIPT, timeout_s=30, **clients)


def test_create_makes_the_vm_and_a_rule_that_admits_the_caller_alone(emulator, clients):
    made = create(spec(), clients)
    assert made.status == "RUNNING" and made.external_address
    [vm] = listed_instances(emulator)
    assert vm.name == "c-controller" and vm.status == "RUNNING"
    assert dict(vm.labels) == {"podmanager-cluster": "c", "podmanager-role": "controller"}
    assert vm.zone.endswith("/zones/sim-zone-a")  # the first of the spec's zones that offers the machine type
    assert vm.machine_type.endswith("/machineTypes/e2-standard-4")
    assert [list(a.scopes) for a in vm.service_accounts] == [[CLOUD_PLATFORM_SCOPE]]
    assert {i.key: i.value for i in vm.metadata.items} == {"startup-script": SCRIPT, "enable-guest-attributes": "TRUE"}
    assert set(vm.tags.items) == {cluster_tag("c"), "pm-c-controller"}  # the cluster's internal rule, its own
    assert vm.network_interfaces[0].network.endswith("/global/networks/default")
    assert len(vm.network_interfaces[0].access_configs) == 1  # reachable from the laptop
    [inserted] = emulator.api.requests_of("compute.instances.insert")
    assert inserted["body"]["disks"][0]["initializeParams"]["diskSizeGb"] == "50"  # an int64: a string in JSON
    [rule] = channel_rules(emulator)
    assert list(rule.source_ranges) == [CALLER]
    assert list(rule.target_tags) == ["pm-c-controller"] and not rule.source_tags
    assert [(a.I_p_protocol, list(a.ports)) for a in rule.allowed] == [("tcp", [str(PORT)])]
    assert find_controller_vm(spec(), clients["instances"]) == made


def test_a_second_create_changes_nothing(emulator, clients):
    first = create(spec(), clients)
    before = changes(emulator)
    assert create(spec(), clients) == first
    assert changes(emulator) == before == ["compute.firewalls.insert", "compute.instances.insert"]


def test_an_interrupted_create_is_found_and_finished(emulator, clients):
    # Interrupted after the rule: the next call makes only the VM.
    clients["networks"].create_firewall(channel_rule(spec(), CALLER, PORT))
    create(spec(), clients)
    assert changes(emulator) == ["compute.firewalls.insert", "compute.instances.insert"]
    delete_controller_vm(spec(), timeout_s=30, **clients)
    # Interrupted after the VM's insert was sent, before it ran: the next call waits for that VM, makes the rule.
    # Our body read by Google's own type (an unknown field would fail) and sent by its client.
    body = json.dumps(instance_body(controller_instance(spec(), "sim-zone-b", SCRIPT)))
    raw(compute_v1.InstancesClient, emulator).insert_unary(project=PROJECT, zone="sim-zone-b",
                                                           instance_resource=compute_v1.Instance.from_json(body))
    emulator.api.requests.clear()
    made = create(spec(), clients)
    assert (made.zone, made.status) == ("sim-zone-b", "RUNNING")
    assert changes(emulator) == ["compute.firewalls.insert"]


def test_another_caller_address_is_added_to_the_rule_and_the_first_kept(emulator, clients):
    create(spec(), clients)
    emulator.api.requests.clear()
    create(spec(), clients, caller="198.51.100.4")  # a second laptop's `up`: the first is not locked out
    [rule] = channel_rules(emulator)
    assert list(rule.source_ranges) == [CALLER, "198.51.100.4/32"]
    assert [name for name, _ in emulator.api.requests if name.startswith("compute.firewalls.")
            and not name.endswith((".get", ".list"))] == ["compute.firewalls.patch"]
    assert len(listed_instances(emulator)) == 1


def test_a_range_wider_than_one_address_is_dropped_from_the_rule_never_kept(emulator, clients):
    wide = channel_rule(spec(), CALLER, PORT)
    clients["networks"].create_firewall(wide.model_copy(update={"source_ranges": ["0.0.0.0/0", "192.0.2.9/32"]}))
    create(spec(), clients)
    [rule] = channel_rules(emulator)
    assert list(rule.source_ranges) == ["192.0.2.9/32", CALLER]


def test_delete_also_removes_an_opening_an_interrupted_access_add_left(emulator, clients):
    create(spec(), clients)
    opening = channel_rule(spec(), CALLER, PORT).model_copy(update={"name": "pm-c-channel-open",
                                                                  "source_ranges": ["0.0.0.0/0"]})
    clients["networks"].create_firewall(opening)
    delete_controller_vm(spec(), timeout_s=30, **clients)
    assert [r.name for r in raw(compute_v1.FirewallsClient, emulator).list(project=PROJECT)
            if r.name.startswith("pm-c-")] == []


def test_delete_removes_the_vm_and_the_rule_and_a_second_delete_is_fine(emulator, clients):
    create(spec(), clients)
    assert delete_controller_vm(spec(), timeout_s=30, **clients) == ControllerVmDeleted(
        instance="c-controller", rule="pm-c-channel")
    assert listed_instances(emulator) == [] and channel_rules(emulator) == []
    assert [r["instance"] for r in emulator.api.requests_of("compute.instances.delete")] == ["c-controller"]
    assert [r["firewall"] for r in emulator.api.requests_of("compute.firewalls.delete")] == ["pm-c-channel"]
    assert delete_controller_vm(spec(), timeout_s=30, **clients) == ControllerVmDeleted(instance=None, rule=None)
    assert find_controller_vm(spec(), clients["instances"]) is None


def test_the_default_zone_passes_zones_that_lack_the_machine_type(emulator, clients):
    made = create(spec(zones=["sim-zone-c", "sim-zone-b"]), clients)  # sim-zone-c offers TPUs only
    assert made.zone == "sim-zone-b"


def test_a_tpu_region_without_general_purpose_vms_puts_the_controller_in_the_nearest_region(emulator, clients):
    # The examples' v4 zone: us-central2 offers TPUs only; the VPC spans regions, so us-central1.
    made = create(spec(zones=["us-central2-b"]), clients)
    assert made.zone == "us-central1-a"
    assert made.subnetwork == "default"  # the auto-mode network's subnetwork of us-central1


def test_nearest_zones_go_from_the_slices_region_to_its_continents_regions_closest_name_first():
    by_region = {"us-central2": ["us-central2-b"], "us-east1": ["us-east1-c", "us-east1-b"],
                 "us-central1": ["us-central1-f", "us-central1-a"], "europe-west4": ["europe-west4-a"],
                 "us-west4": ["us-west4-a"]}
    assert nearest_zones(["us-central2-b"], by_region, in_region_only=False) == [
        "us-central2-b", "us-central1-a", "us-central1-f", "us-east1-b", "us-east1-c", "us-west4-a"]
    assert nearest_zones(["us-central2-b"], by_region, in_region_only=True) == ["us-central2-b"]
    # The spec's zones of the first one's region in the spec's order; the continent's others by name
    # when no region shares more of its name than "us-".
    assert nearest_zones(["us-east1-c", "us-central2-b"], by_region, in_region_only=False) == [
        "us-east1-c", "us-east1-b", "us-central1-a", "us-central1-f", "us-central2-b", "us-west4-a"]


def test_a_named_subnetwork_keeps_the_controller_in_its_region_and_the_refusal_names_controller_zone(emulator,
                                                                                                     clients):
    named = parse_spec({"name": "c", "slices": [{"accelerator": "v4-8"}], "zones": ["us-central2-b"],
                        "network": {"subnetwork": "projects/podmanager-sim/regions/us-central2/subnetworks/default"}},
                       dry_run=True)
    with pytest.raises(SpecError) as refused:
        create(named, clients)
    assert refused.value.exit_code == 2 and "controller.zone" in refused.value.hint
    assert changes(emulator) == []


@pytest.mark.parametrize("controller, field", [
    ({"machine_type": "e2-nonesuch-4"}, "controller.machine_type"),
    ({"zone": "sim-zone-c"}, "controller.zone"),  # offers no general-purpose VMs; sim-zone-a and -b do
    ({"zone": "sim-zone-q"}, "controller.zone"),  # no such zone
])
def test_a_bad_machine_type_or_zone_is_named_and_nothing_is_created(emulator, clients, controller, field):
    with pytest.raises(SpecError) as refused:
        create(spec(**controller), clients)
    assert refused.value.exit_code == 2
    assert refused.value.message.startswith(f"{field}:")
    assert changes(emulator) == []
    assert listed_instances(emulator) == [] and channel_rules(emulator) == []


@pytest.mark.parametrize("caller", ["0.0.0.0/0", "203.0.113.0/24", "my-laptop"])
def test_a_caller_that_is_not_one_address_is_refused_before_any_call(emulator, clients, caller):
    with pytest.raises(SpecError, match="caller") as refused:
        create(spec(), clients, caller=caller)
    assert refused.value.exit_code == 2
    assert list(emulator.api.requests) == []


def test_the_label_filter_is_one_compute_s_grammar_takes(emulator, clients):
    create(spec(), clients)
    assert find_controller_vm(spec(), clients["instances"]).name == "c-controller"
    sent = [r["filter"] for r in emulator.api.requests_of("compute.instances.aggregatedList")]
    assert sent and set(sent) == {'(labels.podmanager-cluster = "c") (labels.podmanager-role = "controller")'}


@pytest.mark.parametrize("halt, restart", [("stop", "start"), ("suspend", "resume")])
def test_a_stopped_or_suspended_controller_is_started_again_by_create(emulator, clients, halt, restart):
    create(spec(), clients)
    instances = raw(compute_v1.InstancesClient, emulator)
    getattr(instances, f"{halt}_unary")(project=PROJECT, zone="sim-zone-a", instance="c-controller")
    assert find_controller_vm(spec(), clients["instances"]).status in ("TERMINATED", "SUSPENDED")
    made = create_controller_vm(spec(), caller=CALLER, port=PORT, startup_script=SCRIPT, timeout_s=5, **clients)
    assert made.status == "RUNNING"
    assert [r["instance"] for r in emulator.api.requests_of(f"compute.instances.{restart}")] == ["c-controller"]
    assert len(emulator.api.requests_of("compute.instances.insert")) == 1  # the same VM, its disk kept


@pytest.mark.parametrize("halt", ["stop", "suspend"])
def test_a_stopped_or_suspended_controller_is_deleted(emulator, clients, halt):
    create(spec(), clients)
    getattr(raw(compute_v1.InstancesClient, emulator), f"{halt}_unary")(project=PROJECT, zone="sim-zone-a",
                                                                         instance="c-controller")
    assert delete_controller_vm(spec(), timeout_s=5, **clients).instance == "c-controller"
    assert listed_instances(emulator) == []


def test_the_emulator_refuses_a_start_of_a_suspended_vm_as_compute_engine_may(emulator, clients):
    create(spec(), clients)
    instances = raw(compute_v1.InstancesClient, emulator)
    instances.suspend_unary(project=PROJECT, zone="sim-zone-a", instance="c-controller")
    with pytest.raises(google_exceptions.BadRequest, match="instances.start needs it TERMINATED"):
        instances.start_unary(project=PROJECT, zone="sim-zone-a", instance="c-controller")
    instances.resume_unary(project=PROJECT, zone="sim-zone-a", instance="c-controller")
    poll_until(lambda: instances.get(project=PROJECT, zone="sim-zone-a", instance="c-controller").status == "RUNNING",
               timeout_s=10, interval_s=0.05)
    instances.stop_unary(project=PROJECT, zone="sim-zone-a", instance="c-controller")
    with pytest.raises(google_exceptions.BadRequest, match="instances.resume needs it SUSPENDED"):
        instances.resume_unary(project=PROJECT, zone="sim-zone-a", instance="c-controller")
