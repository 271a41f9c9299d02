"""The network preflight of `up`, through podmanager's Compute Engine client (plain JSON) against the
emulator's Compute Engine (served in-process), which starts as a new Google Cloud project:
each failure a SpecError (exit 2) naming the fix with nothing created, the cluster's firewall
rule made by `up` and deleted by `down`."""

from __future__ import annotations

import pytest

from podmanager.cloud.gcp.compute import ComputeNetworks
from podmanager.cloud.network import Nat, Router
from podmanager.cluster.preflight import check_network, delete_cluster_rule
from podmanager.core.errors import SpecError
from podmanager.core.spec import parse_spec
from podmanager.emulator.server import Emulator

PROJECT = "podmanager-sim"
REGION = "sim-zone"  # the region of the simulated zones sim-zone-a, -b, -c


@pytest.fixture
def emulator():
    served = Emulator(PROJECT, persist=False)
    served.serve_rest()
    yield served
    served.stop()


@pytest.fixture
def compute(emulator):
    with ComputeNetworks(PROJECT, endpoint=f"http://127.0.0.1:{emulator.rest_port}", retry_deadline_s=5,
                         retry_initial_s=0.05, poll_interval_s=0.05) as client:
        yield client


def spec(**network):
    return parse_spec({"name": "c", "slices": [{"accelerator": "v4-8"}], **({"network": network} if network else {})},
                      dry_run=True)


def calls(emulator, method):
    return emulator.api.requests_of(method)


def changes(emulator):
    return [name for name, _ in emulator.api.requests if name.endswith((".insert", ".delete"))]


def test_a_default_spec_passes_and_its_rule_is_made_once_and_deleted_by_down(emulator, compute):
    events = []
    record = lambda kind, message, **data: events.append((kind, message))  # noqa: E731

    check_network(spec(), compute, record=record)
    check_network(spec(), compute, record=record)  # a second `up`: the rule is there

    [insert] = calls(emulator, "compute.firewalls.insert")
    rule = insert["body"]
    assert rule["name"] == "pm-c-internal" and rule["network"].endswith("/global/networks/default")
    assert (rule["sourceTags"], rule["targetTags"]) == (["pm-c"], ["pm-c"])
    assert sorted(a["IPProtocol"] for a in rule["allowed"]) == ["icmp", "tcp", "udp"]
    assert all(not a.get("ports") for a in rule["allowed"])  # every port
    assert [kind for kind, _ in events] == ["firewall_created"]

    delete_cluster_rule(spec(), compute, record)
    assert [r["firewall"] for r in calls(emulator, "compute.firewalls.delete")] == ["pm-c-internal"]
    assert "pm-c-internal" not in {r.name for r in compute.firewalls()}


def test_without_external_ips_a_new_project_is_refused_naming_nat_and_private_google_access(emulator, compute):
    with pytest.raises(SpecError) as refused:
        check_network(spec(enable_external_ips=False), compute, record=lambda *a, **k: None)
    message = str(refused.value)
    assert refused.value.exit_code == 2
    assert "network.enable_external_ips is false" in message and "nothing was created" in message
    assert "Cloud NAT" in message and "gcloud compute routers nats create" in message
    assert "Private Google Access" in message and "--enable-private-ip-google-access" in message
    assert changes(emulator) == []  # nothing created

    with emulator.sim.compute() as project:  # the network admin adds both
        project.set_private_ip_google_access(REGION, "default", True)
        project.insert_router(Router(name="nat-router", region=REGION, network="default", nats=[Nat(name="nat")]))
    with pytest.raises(SpecError) as still:  # ...in another region only: sim's zones are still refused
        check_network(parse_spec({"name": "c", "slices": [{"accelerator": "v4-8"}], "zones": ["us-east5-a"],
                                  "network": {"enable_external_ips": False}}, dry_run=True),
                      compute, record=lambda *a, **k: None)
    assert "in us-east5" in str(still.value)
    check_network(spec(enable_external_ips=False), compute, record=lambda *a, **k: None)


def test_only_what_is_missing_is_named(compute, emulator):
    with emulator.sim.compute() as project:
        project.set_private_ip_google_access(REGION, "default", True)
    with pytest.raises(SpecError) as refused:
        check_network(spec(enable_external_ips=False), compute, record=lambda *a, **k: None)
    assert "Cloud NAT" in str(refused.value) and "Private Google Access on" not in str(refused.value)


def test_a_missing_rule_podmanager_may_not_create_is_named(emulator, compute):
    with emulator.sim.compute() as project:
        project.delete_firewall("default-allow-internal")
    emulator.sim.deny_firewall_changes()

    with pytest.raises(SpecError) as refused:
        check_network(spec(), compute, record=lambda *a, **k: None)
    text = str(refused.value)
    assert refused.value.exit_code == 2 and "may not create rule pm-c-internal" in text
    assert ("gcloud compute firewall-rules create pm-c-internal --project podmanager-sim --network default "
            "--direction INGRESS --allow tcp,udp,icmp --source-tags pm-c --target-tags pm-c") in text


def test_a_rule_that_lets_the_cluster_in_will_do_where_podmanager_may_not_create_its_own(emulator, compute):
    emulator.sim.deny_firewall_changes()  # default-allow-internal (10.128.0.0/9, every port) is still there
    events = []
    check_network(spec(), compute, record=lambda kind, message, **data: events.append((kind, message)))
    assert events == [("firewall_existing", "may not create firewall rule pm-c-internal; rule default-allow-internal "
                                            "lets the cluster's VMs reach each other")]
    assert "pm-c-internal" not in {r.name for r in compute.firewalls()}


def test_an_index_on_this_machines_loopback_is_refused_for_real_vms_and_nothing_made(emulator, compute):
    local = {"name": "c", "slices": [{"accelerator": "v4-8"}], "project": PROJECT, "zones": ["sim-zone-a"],
             "boot": {"index_url": "http://127.0.0.1:8080/simple/",
                      "extra_index_urls": ["https://pypi.example.com/simple/", "https://localhost/simple/"]}}
    with pytest.raises(SpecError) as refused:
        check_network(parse_spec(local), compute, record=lambda *a, **k: None)
    text = str(refused.value)
    assert "boot.index_url: http://127.0.0.1:8080/simple/ is this machine's loopback, which a TPU VM cannot " \
           "reach" in text and "boot.extra_index_urls[1]: https://localhost/simple/" in text
    assert "pypi.example.com" not in text and refused.value.exit_code == 2 and changes(emulator) == []
    # A dry run's VMs share this machine: its loopback index is theirs.
    check_network(parse_spec(local, dry_run=True), compute, record=lambda *a, **k: None)


def test_a_missing_network_or_subnetwork_is_named(emulator, compute):
    with pytest.raises(SpecError, match=r"network.network: project podmanager-sim has no VPC network 'tpu-vpc'"):
        check_network(spec(network="tpu-vpc"), compute, record=lambda *a, **k: None)
    with pytest.raises(SpecError, match=r"network.subnetwork: network default has no subnetwork 'tpu-subnet' in "
                                        r"region sim-zone; it has default there"):
        check_network(spec(subnetwork="tpu-subnet"), compute, record=lambda *a, **k: None)
    with emulator.sim.compute() as project:
        project.delete_subnetwork(REGION, "default")
    with pytest.raises(SpecError, match=r"network default has no subnetwork in region sim-zone.*gcloud compute "
                                        r"networks subnets create"):
        check_network(spec(), compute, record=lambda *a, **k: None)
    assert changes(emulator) == []


def test_down_without_the_rule_or_the_right_to_delete_it_still_goes_on(emulator, compute):
    events = []
    delete_cluster_rule(spec(), compute, lambda kind, message, **data: events.append(kind))  # never made
    assert events == []
    with ComputeNetworks(PROJECT, endpoint=f"http://127.0.0.1:{emulator.rest_port}") as again:
        check_network(spec(), again, record=lambda *a, **k: None)
    emulator.sim.deny_firewall_changes()
    with ComputeNetworks(PROJECT, endpoint=f"http://127.0.0.1:{emulator.rest_port}") as again:
        delete_cluster_rule(spec(), again, lambda kind, message, **data: events.append((kind, message)))
    [(kind, message)] = events
    assert kind == "firewall_left" and "gcloud compute firewall-rules delete pm-c-internal" in message


def test_a_python_without_a_download_is_refused_before_anything_is_created(monkeypatch):
    import platform

    from podmanager.cluster.cluster_runtime import ClusterRuntime
    from podmanager.cluster.preflight import check_before_up
    from podmanager.controller.python_downloads import (
        check_python_download,
        tpu_vm_downloads,
    )
    from podmanager.emulator.sim.cloud import SimCloud
    from podmanager.state import StateStore

    downloads = tpu_vm_downloads()  # uv's built-in list, read offline
    assert downloads and "3.11.2" not in downloads  # Debian 12's Python has no build
    check_python_download(downloads[0], downloads)

    monkeypatch.setattr(platform, "python_version", lambda: "3.11.2")
    sim = SimCloud(PROJECT)
    bare = parse_spec({"name": "c", "slices": [{"accelerator": "v4-8"}], "simulation": {"vm_image": "bare"}},
                      dry_run=True)
    with pytest.raises(SpecError) as refused:
        check_before_up(ClusterRuntime(bare, store=StateStore(), simulator=sim))
    assert refused.value.exit_code == 2
    assert "exact Python, 3.11.2, and uv has no download of it (it has 3.11." in str(refused.value)
    assert "uv venv --python 3.11." in str(refused.value)
    assert sim.all_nodes() == []
    # VMs that start from the controller's environment install no Python: nothing to refuse.
    linked = parse_spec({"name": "c", "slices": [{"accelerator": "v4-8"}], "simulation": {"vm_image": "controller"}},
                        dry_run=True)
    check_before_up(ClusterRuntime(linked, store=StateStore(), simulator=sim))


def test_a_shared_vpc_is_read_and_its_rule_made_in_the_host_project(emulator, compute):
    check_network(spec(network="projects/host-project/global/networks/default"), compute, record=lambda *a, **k: None)
    assert {r["project"] for r in calls(emulator, "compute.networks.get")} == {"host-project"}
    [insert] = calls(emulator, "compute.firewalls.insert")
    assert insert["project"] == "host-project"
    delete_cluster_rule(spec(network="projects/host-project/global/networks/default"), compute, lambda *a, **k: None)
    assert [r["project"] for r in calls(emulator, "compute.firewalls.delete")] == ["host-project"]
