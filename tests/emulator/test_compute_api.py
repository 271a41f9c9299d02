"""The emulator's Compute Engine side, through google-cloud-compute's own clients: a project
that starts as a new Google Cloud project does, changed through the API's calls, every call
logged, the records kept with the simulated cloud's state."""

from __future__ import annotations

import pytest
from google.api_core import exceptions as google_exceptions
from google.api_core.client_options import ClientOptions
from google.cloud import compute_v1
from served_emulator import compute_emulator

from podmanager.cloud.gcp import emulator_identity
from podmanager.cloud.instances import Instance
from podmanager.core.clock import FakeClock, poll_until
from podmanager.emulator.rulebook import INSTANCE_CREATE_S, INSTANCE_DELETE_S
from podmanager.emulator.sim.cloud import SimCloud
from podmanager.emulator.sim.instances import SimInstances

PROJECT = "p-net"


@pytest.fixture
def emulator():
    with compute_emulator(PROJECT) as served:
        yield served


def client(kind, emulator):
    return kind(credentials=emulator_identity.credentials(),  # the user's token (the emulator's IAM)
                client_options=ClientOptions(api_endpoint=f"http://127.0.0.1:{emulator.rest_port}"))


def test_a_new_project_has_the_default_network_rules_and_no_nat(emulator):
    network = client(compute_v1.NetworksClient, emulator).get(project=PROJECT, network="default")
    assert network.auto_create_subnetworks
    subnetworks = list(client(compute_v1.SubnetworksClient, emulator).list(project=PROJECT, region="us-central2"))
    assert [(s.name, s.private_ip_google_access) for s in subnetworks] == [("default", False)]
    assert subnetworks[0].ip_cidr_range.startswith("10.1")
    assert subnetworks[0].network.endswith("/global/networks/default")
    rules = {r.name: r for r in client(compute_v1.FirewallsClient, emulator).list(project=PROJECT)}
    assert set(rules) == {"default-allow-internal", "default-allow-ssh", "default-allow-rdp", "default-allow-icmp"}
    assert list(rules["default-allow-internal"].source_ranges) == ["10.128.0.0/9"]
    assert {a.I_p_protocol for a in rules["default-allow-internal"].allowed} == {"tcp", "udp", "icmp"}
    assert list(client(compute_v1.RoutersClient, emulator).list(project=PROJECT, region="us-central2")) == []


def test_rules_inserted_and_deleted_are_operations_and_logged(emulator):
    firewalls = client(compute_v1.FirewallsClient, emulator)
    rule = compute_v1.Firewall(name="pm-c-internal", network="global/networks/default", source_tags=["pm-c"],
                               target_tags=["pm-c"], allowed=[compute_v1.Allowed(I_p_protocol="tcp")])
    operation = firewalls.insert_unary(project=PROJECT, firewall_resource=rule)
    done = client(compute_v1.GlobalOperationsClient, emulator).wait(project=PROJECT, operation=operation.name)
    assert done.status == compute_v1.Operation.Status.DONE
    assert list(firewalls.get(project=PROJECT, firewall="pm-c-internal").target_tags) == ["pm-c"]
    with pytest.raises(google_exceptions.Conflict):
        firewalls.insert_unary(project=PROJECT, firewall_resource=rule)
    firewalls.delete_unary(project=PROJECT, firewall="pm-c-internal")
    with pytest.raises(google_exceptions.NotFound):
        firewalls.get(project=PROJECT, firewall="pm-c-internal")
    inserts = emulator.api.requests_of("compute.firewalls.insert")
    assert [r["body"]["name"] for r in inserts] == ["pm-c-internal", "pm-c-internal"]
    assert [r["firewall"] for r in emulator.api.requests_of("compute.firewalls.delete")] == ["pm-c-internal"]


def test_a_deny_rule_and_an_egress_rules_destinations_are_kept_and_served(emulator):
    firewalls = client(compute_v1.FirewallsClient, emulator)
    firewalls.insert_unary(project=PROJECT, firewall_resource=compute_v1.Firewall(
        name="no-smtp-out", network="global/networks/default", direction="EGRESS", priority=900,
        destination_ranges=["0.0.0.0/0"], denied=[compute_v1.Denied(I_p_protocol="tcp", ports=["25"])]))
    served = firewalls.get(project=PROJECT, firewall="no-smtp-out")
    assert [(d.I_p_protocol, list(d.ports)) for d in served.denied] == [("tcp", ["25"])]
    assert list(served.allowed) == [] and list(served.destination_ranges) == ["0.0.0.0/0"]
    for both_or_neither in (dict(), dict(allowed=[compute_v1.Allowed(I_p_protocol="tcp")],
                                         denied=[compute_v1.Denied(I_p_protocol="udp")])):
        with pytest.raises(google_exceptions.BadRequest, match="exactly one of allowed or denied"):
            firewalls.insert_unary(project=PROJECT, firewall_resource=compute_v1.Firewall(
                name="odd", network="global/networks/default", **both_or_neither))


def test_a_test_turns_on_private_google_access_and_adds_a_nat(emulator):
    subnetworks = client(compute_v1.SubnetworksClient, emulator)
    subnetworks.set_private_ip_google_access_unary(
        project=PROJECT, region="us-central2", subnetwork="default",
        subnetworks_set_private_ip_google_access_request_resource=compute_v1.SubnetworksSetPrivateIpGoogleAccessRequest(
            private_ip_google_access=True))
    assert subnetworks.get(project=PROJECT, region="us-central2", subnetwork="default").private_ip_google_access
    routers = client(compute_v1.RoutersClient, emulator)
    routers.insert_unary(project=PROJECT, region="us-central2", router_resource=compute_v1.Router(
        name="nat-router", network="global/networks/default",
        nats=[compute_v1.RouterNat(name="nat", source_subnetwork_ip_ranges_to_nat="ALL_SUBNETWORKS_ALL_IP_RANGES")]))
    [router] = routers.list(project=PROJECT, region="us-central2")
    assert [n.source_subnetwork_ip_ranges_to_nat for n in router.nats] == ["ALL_SUBNETWORKS_ALL_IP_RANGES"]
    assert list(routers.list(project=PROJECT, region="europe-west4")) == []


def test_firewall_changes_refused_when_denied(emulator):
    emulator.api.control("deny_firewall_changes", denied=True)
    with pytest.raises(google_exceptions.Forbidden, match="compute.firewalls.create"):
        client(compute_v1.FirewallsClient, emulator).insert_unary(project=PROJECT, firewall_resource=compute_v1.Firewall(
            name="pm-c-internal", network="global/networks/default", allowed=[compute_v1.Allowed(I_p_protocol="tcp")]))


def test_the_records_are_kept_with_the_state():
    sim = SimCloud(PROJECT)
    with sim.compute() as project:
        project.delete_firewall("default-allow-internal")
        project.delete_subnetwork("sim-zone", "default")
    _, saved = sim.snapshot()
    from podmanager.emulator.sim.records import SimState

    again = SimCloud(PROJECT, state=SimState.model_validate_json(saved))
    with again.compute() as project:
        assert "default-allow-internal" not in {r.name for r in project.firewalls()}
        assert project.subnetworks("sim-zone") == []  # deleted stays deleted, not made again
        assert [s.name for s in project.subnetworks("us-east5")] == ["default"]


# ---------------------------------------------------------------------- VMs (the controller's, issue 36)


def _vm(name="c-controller", zone="sim-zone-a", machine_type="e2-standard-4", **fields):
    return Instance(name=name, zone=zone, machine_type=machine_type, labels={"podmanager-cluster": "c"}, **fields)


def test_an_instance_is_up_after_its_latency_and_gone_after_its_delete():
    clock = FakeClock()
    sim = SimCloud(PROJECT, clock=clock)
    with sim.compute() as project:
        operation = SimInstances(project).insert(_vm())
        assert SimInstances(project).instance("sim-zone-a", "c-controller").status == "PROVISIONING"
    clock.advance(INSTANCE_CREATE_S)
    with sim.compute() as project:
        assert project.now >= project.operation(operation.name, zone="sim-zone-a").done_at
        up = SimInstances(project).instance("sim-zone-a", "c-controller")
        assert (up.status, up.subnetwork, up.internal_ip) == ("RUNNING", "default", "10.128.0.2")
        SimInstances(project).delete("sim-zone-a", "c-controller")
        assert SimInstances(project).instance("sim-zone-a", "c-controller").status == "STOPPING"
    clock.advance(INSTANCE_DELETE_S)
    with sim.compute() as project:
        assert SimInstances(project).instances(None, {}) == []


def test_a_clusters_simulation_sets_how_long_its_vms_take_and_a_stop_or_start_takes_as_long():
    clock = FakeClock()
    sim = SimCloud(PROJECT, clock=clock)
    sim.configure_cluster("c", 0.5, 0.1, instance_create_latency_s=4.0, instance_delete_latency_s=6.0)

    def status() -> str:
        with sim.compute() as project:
            found = SimInstances(project).instances(None, {})
            return found[0].status if found else "gone"

    with sim.compute() as project:
        SimInstances(project).insert(_vm())
    clock.advance(3.9)
    assert status() == "PROVISIONING"
    clock.advance(0.1)
    assert status() == "RUNNING"
    with sim.compute() as project:
        stopping = SimInstances(project).halt("sim-zone-a", "c-controller", "TERMINATED")
        assert stopping.done_at == project.now + 6.0  # a stop takes a delete's time
        started = SimInstances(project).start("sim-zone-a", "c-controller", "start")
        assert started.done_at == project.now + 4.0  # a start an insert's
        SimInstances(project).delete("sim-zone-a", "c-controller")
    clock.advance(5.9)
    assert status() == "STOPPING"
    clock.advance(0.1)
    assert status() == "gone"


def test_instances_through_the_client_library_with_zone_operations(emulator):
    instances = client(compute_v1.InstancesClient, emulator)
    operations = client(compute_v1.ZoneOperationsClient, emulator)
    vm = compute_v1.Instance(
        name="c-controller", machine_type="zones/sim-zone-b/machineTypes/e2-standard-4", labels={"podmanager-cluster": "c"},
        network_interfaces=[compute_v1.NetworkInterface(network="global/networks/default",
                                                        access_configs=[compute_v1.AccessConfig(type_="ONE_TO_ONE_NAT")])],
        disks=[compute_v1.AttachedDisk(boot=True, initialize_params=compute_v1.AttachedDiskInitializeParams(disk_size_gb=20))])
    started = instances.insert_unary(project=PROJECT, zone="sim-zone-b", instance_resource=vm)
    assert started.status == compute_v1.Operation.Status.RUNNING  # done only after the simulated latency
    poll_until(lambda: operations.wait(project=PROJECT, zone="sim-zone-b", operation=started.name).status
               == compute_v1.Operation.Status.DONE, timeout_s=10, interval_s=0.05)
    got = instances.get(project=PROJECT, zone="sim-zone-b", instance="c-controller")
    assert got.status == "RUNNING" and got.network_interfaces[0].access_configs[0].nat_i_p
    assert [i.name for i in instances.list(request={
        "project": PROJECT, "zone": "sim-zone-b", "filter": 'labels.podmanager-cluster = "c"'})] == ["c-controller"]
    assert list(instances.list(request={"project": PROJECT, "zone": "sim-zone-b",
                                       "filter": "labels.podmanager-cluster = other"})) == []
    assert [i.name for i in instances.list(request={"project": PROJECT, "zone": "sim-zone-b",
                                                    "filter": "name eq c-.*"})] == ["c-controller"]
    with pytest.raises(google_exceptions.BadRequest, match="Invalid list filter expression"):
        list(instances.list(request={"project": PROJECT, "zone": "sim-zone-b",
                                     "filter": 'labels.podmanager-cluster = "c" AND name = "c-controller"'}))
    with pytest.raises(google_exceptions.Conflict):
        instances.insert_unary(project=PROJECT, zone="sim-zone-b", instance_resource=vm)
    instances.delete_unary(project=PROJECT, zone="sim-zone-b", instance="c-controller")
    poll_until(lambda: not list(instances.aggregated_list(project=PROJECT)), timeout_s=10, interval_s=0.05)
    logged = [r["body"]["name"] for r in emulator.api.requests_of("compute.instances.insert")]
    assert logged == ["c-controller", "c-controller"]
    assert [r["instance"] for r in emulator.api.requests_of("compute.instances.delete")] == ["c-controller"]


def test_zones_without_general_purpose_vms_and_unknown_zones_are_refused(emulator):
    machine_types = client(compute_v1.MachineTypesClient, emulator)
    assert machine_types.get(project=PROJECT, zone="sim-zone-a", machine_type="e2-standard-4").guest_cpus == 4
    with pytest.raises(google_exceptions.NotFound):  # sim-zone-c offers TPUs only
        machine_types.get(project=PROJECT, zone="sim-zone-c", machine_type="e2-standard-4")
    instances = client(compute_v1.InstancesClient, emulator)
    for zone, machine_type, says in (("sim-zone-c", "e2-standard-4", "machineType"), ("sim-zone-a", "e2-nope", "machineType"),
                                     ("moon-base-a", "e2-standard-4", "Unknown zone")):
        with pytest.raises(google_exceptions.BadRequest, match=says):
            instances.insert_unary(project=PROJECT, zone=zone, instance_resource=compute_v1.Instance(
                name="vm", machine_type=f"zones/{zone}/machineTypes/{machine_type}"))
    assert list(instances.aggregated_list(project=PROJECT)) == []
    zones = {z.name: z.region.rsplit("/", 1)[-1] for z in client(compute_v1.ZonesClient, emulator).list(project=PROJECT)}
    assert {z: r for z, r in zones.items() if r == "sim-zone"} == {
        "sim-zone-a": "sim-zone", "sim-zone-b": "sim-zone", "sim-zone-c": "sim-zone"}
    # Google's zones too: us-central2-b (a TPU region) offers no general-purpose VM, us-central1's do.
    assert zones["us-central2-b"] == "us-central2" and zones["us-central1-a"] == "us-central1"
    with pytest.raises(google_exceptions.NotFound):
        machine_types.get(project=PROJECT, zone="us-central2-b", machine_type="e2-standard-4")
    assert machine_types.get(project=PROJECT, zone="us-central1-a", machine_type="e2-standard-4").guest_cpus == 4
