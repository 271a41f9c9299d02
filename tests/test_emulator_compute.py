"""The emulator's Compute Engine side, through google-cloud-compute's own clients: a project
that starts as a new Google Cloud project does, changed through the API's calls, every call
logged, the records kept with the simulated cloud's state."""

from __future__ import annotations

import pytest
from google.api_core import exceptions as google_exceptions
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

from podmanager.emulator.server import Emulator
from podmanager.emulator.sim.cloud import SimCloud

PROJECT = "p-net"


@pytest.fixture
def emulator():
    served = Emulator(PROJECT, persist=False)
    served.serve_rest()
    yield served
    served.stop()


def client(kind, emulator):
    return kind(credentials=AnonymousCredentials(),
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
    assert [r.firewall_resource.name for r in inserts] == ["pm-c-internal", "pm-c-internal"]
    assert [r.firewall for r in emulator.api.requests_of("compute.firewalls.delete")] == ["pm-c-internal"]


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
