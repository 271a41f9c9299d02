"""A simulated Compute Engine instance's metadata server answers as GCE's does for an instance:
its metadata, identity and addresses, the project, its service account's email and token, and
its guest attributes (PUT, then read back); only with `Metadata-Flavor: Google`. No processes."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from podmanager.cloud import errors as cloud_errors
from podmanager.cloud.instances import Instance
from podmanager.cluster.controller_place import interface_networks
from podmanager.core.clock import FakeClock
from podmanager.emulator.iam import tokens
from podmanager.emulator.instance_metadata import InstanceFacts
from podmanager.emulator.metadata import MetadataServers
from podmanager.emulator.rulebook import INSTANCE_CREATE_S, INSTANCE_DELETE_S
from podmanager.emulator.sim.cloud import SIMULATED_PROJECT_NUMBER, SimCloud
from podmanager.emulator.sim.instances import SimInstances


def served_instance(metadata: dict[str, str]):
    clock = FakeClock()
    sim = SimCloud("p-meta", clock=clock)
    with sim.compute() as project:
        SimInstances(project).insert(Instance(name="c-controller", zone="sim-zone-a", machine_type="e2-standard-2",
                                              metadata=metadata))
    clock.advance(INSTANCE_CREATE_S)
    servers = MetadataServers(sim)
    port = servers.serve_vm("instances/sim-zone-a/c-controller", InstanceFacts(sim=sim, zone="sim-zone-a",
                                                                               name="c-controller"))
    return sim, servers, f"http://127.0.0.1:{port}/computeMetadata/v1/"


@pytest.fixture
def instance_vm():
    sim, servers, base = served_instance({"startup-script": "echo hi", "k": "v", "enable-guest-attributes": "TRUE"})
    yield sim, base
    servers.stop_all()


@pytest.fixture
def without_guest_attributes():
    sim, servers, base = served_instance({"startup-script": "echo hi"})
    yield sim, base
    servers.stop_all()


def call(url: str, *, data: str | None = None, header: bool = True) -> tuple[int, str]:
    request = urllib.request.Request(url, data=data.encode() if data is not None else None,
                                     method="PUT" if data is not None else "GET",
                                     headers={"Metadata-Flavor": "Google"} if header else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_it_serves_what_gce_serves_an_instance(instance_vm):
    sim, base = instance_vm
    with sim.compute() as project:
        internal_ip = SimInstances(project).instance("sim-zone-a", "c-controller").internal_ip
    assert call(base + "instance/attributes/startup-script") == (200, "echo hi")
    assert call(base + "instance/attributes/k") == (200, "v")
    assert call(base + "instance/attributes/missing")[0] == 404
    assert call(base + "instance/name") == (200, "c-controller")
    assert call(base + "instance/zone") == (200, f"projects/{SIMULATED_PROJECT_NUMBER}/zones/sim-zone-a")
    assert call(base + "instance/hostname") == (200, "c-controller.sim-zone-a.c.p-meta.internal")
    assert call(base + "instance/id")[1].isdigit()
    assert call(base + "instance/network-interfaces/0/ip") == (200, internal_ip) and internal_ip
    assert call(base + "instance/network-interfaces/0/access-configs/0/external-ip") == (200, "127.0.0.1")
    assert call(base + "project/project-id") == (200, "p-meta")
    email = f"{SIMULATED_PROJECT_NUMBER}-compute@developer.gserviceaccount.com"
    assert call(base + "instance/service-accounts/default/email") == (200, email)
    issued = json.loads(call(base + "instance/service-accounts/default/token")[1])["access_token"]
    assert tokens.principal_of(issued) == f"serviceAccount:{email}"  # the emulator knows the VM by it
    assert call(base + "instance/name", header=False)[0] == 403


def test_its_interfaces_read_whole_name_the_instances_network_as_the_local_controller_check_reads_them(
        instance_vm, monkeypatch):
    sim, base = instance_vm
    with sim.compute() as project:
        internal_ip = SimInstances(project).instance("sim-zone-a", "c-controller").internal_ip
    network = f"projects/{SIMULATED_PROJECT_NUMBER}/networks/default"
    assert call(base + "instance/network-interfaces/0/network") == (200, network)
    assert call(base + "instance/network-interfaces/") == (200, "0/\n")
    code, whole = call(base + "instance/network-interfaces/?recursive=true")
    assert code == 200 and json.loads(whole) == [{
        "accessConfigs": [{"externalIp": "127.0.0.1", "type": "ONE_TO_ONE_NAT"}], "ip": internal_ip,
        "network": network}]
    # podmanager's own question (is this machine in the cluster's network?) gets its answer here.
    monkeypatch.setenv("GCE_METADATA_HOST", base.split("/")[2])
    assert interface_networks() == ["default"]


def test_guest_attributes_put_then_read_and_gone_with_the_instance(instance_vm):
    sim, base = instance_vm
    assert call(base + "instance/guest-attributes/podmanager/stage")[0] == 404
    assert call(base + "instance/guest-attributes/podmanager/stage", data="ready")[0] == 200
    assert call(base + "instance/guest-attributes/podmanager/stage") == (200, "ready")
    assert call(base + "instance/guest-attributes/no-key", data="x")[0] == 400
    with sim.compute() as project:
        assert SimInstances(project).guest_attributes("sim-zone-a", "c-controller", "podmanager/") == [
            ("podmanager", "stage", "ready")]
        SimInstances(project).delete("sim-zone-a", "c-controller")
    sim.clock.advance(INSTANCE_DELETE_S)
    assert call(base + "instance/name")[0] == 404  # a deleted instance's server knows nothing


def test_a_write_without_enable_guest_attributes_is_refused_as_gce_refuses_it(without_guest_attributes):
    sim, base = without_guest_attributes
    assert call(base + "instance/guest-attributes/podmanager/stage", data="ready") == (
        403, "Guest attributes endpoint access is disabled.\n")
    with sim.compute() as project, pytest.raises(cloud_errors.NotFoundError):
        SimInstances(project).guest_attributes("sim-zone-a", "c-controller", "podmanager/")


def test_writes_beyond_three_a_second_or_ten_a_minute_are_dropped(instance_vm, caplog):
    sim, base = instance_vm
    url = base + "instance/guest-attributes/podmanager/stage"

    def stored() -> str:
        with sim.compute() as project:
            return SimInstances(project).guest_attributes("sim-zone-a", "c-controller", "podmanager/stage")[0][2]

    for n in range(4):  # at one instant: the fourth is over the burst
        assert call(url, data=f"w{n}")[0] == 200  # dropped silently, as Google may
    assert stored() == "w2" and "dropped" in caplog.text
    for n in range(4, 12):  # one a second: seven more make the minute's ten, the next is dropped
        sim.clock.advance(1.0)
        call(url, data=f"w{n}")
    assert stored() == "w10"
    sim.clock.advance(60.0)
    call(url, data="later")
    assert stored() == "later"
