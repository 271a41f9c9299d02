"""The simulated VPC as the emulator's Compute records describe it (`emulator/network/model.py`):
subnetworks and their flags, every VM's addresses and tags, kept from one build to the next.
Pure: no machine needed."""

from __future__ import annotations

from ipaddress import ip_address, ip_network

import pytest

from podmanager.cloud.base import NodeNetwork, NodeState
from podmanager.cloud.instances import Instance
from podmanager.cloud.network import NAT_LISTED_SUBNETWORKS, Nat, Router, region_of
from podmanager.core.spec import Capacity
from podmanager.emulator.network.model import Internet, NetworkModelError, build_vpc
from podmanager.emulator.sim.compute import SimCompute
from podmanager.emulator.sim.instances import MACHINE_TYPES, SimInstances
from podmanager.emulator.sim.records import ComputeState, NodeRecord

ZONE = next(iter(MACHINE_TYPES))
REGION = region_of(ZONE)
INTERNET = Internet(7)


def project() -> tuple[SimCompute, SimInstances]:
    compute = SimCompute(ComputeState(), "sim-project")
    return compute, SimInstances(compute)


def vm(instances: SimInstances, name: str, **fields) -> None:
    instances.insert(Instance(name=name, zone=ZONE, machine_type="e2-standard-2", **fields))


def tpu(name: str, hosts: int, network: NodeNetwork | None = None) -> NodeRecord:
    return NodeRecord(name=name, zone=ZONE, accelerator_type="v4-16", state=NodeState.READY, labels={},
                      capacity=Capacity.ON_DEMAND, runtime_version="v2-alpha-tpuv4", metadata={},
                      endpoints=["127.0.0.1"] * hosts, create_time=0.0, ready_at=0.0, network=network)


def test_a_new_projects_vms_keep_the_simulated_apis_addresses_and_get_public_ones_from_the_internet():
    compute, instances = project()
    vm(instances, "controller", tags=["pm-c"])
    vm(instances, "private", external_ip=False)
    vpc = build_vpc(compute.state, [], INTERNET)
    subnet = vpc.subnets_of("default")[0]
    assert (subnet.region, subnet.cidr, subnet.gateway) == (REGION, ip_network("10.128.0.0/20"), ip_address("10.128.0.1"))
    assert not subnet.private_google_access and not subnet.cloud_nat
    controller, private = vpc.host(f"instance:{ZONE}/controller"), vpc.host(f"instance:{ZONE}/private")
    assert str(controller.internal_ip) == compute.state.instances[f"{ZONE}/controller"].instance.internal_ip
    assert controller.tags == ("pm-c",) and controller.external_ip in INTERNET.external_pool()
    assert private.external_ip is None and private.internal_ip in subnet.cidr
    assert vpc.edge("default") in INTERNET.edge_pool()
    assert [r.name for r in vpc.firewall_rules] == ["default-allow-internal", "default-allow-ssh", "default-allow-rdp",
                                                    "default-allow-icmp"]


def test_a_tpu_nodes_workers_get_free_addresses_of_their_subnetwork_and_its_tags():
    compute, instances = project()
    vm(instances, "controller")
    taken = ip_address(compute.state.instances[f"{ZONE}/controller"].instance.internal_ip)
    node = tpu("slice-0", 2, NodeNetwork(tags=("pm-cluster",), enable_external_ips=True))
    vpc = build_vpc(compute.state, [node], INTERNET)
    workers = [vpc.host(f"tpu:{ZONE}/slice-0/{w}") for w in (0, 1)]
    addresses = {w.internal_ip for w in workers}
    assert len(addresses) == 2 and taken not in addresses
    assert all(a in vpc.subnets_of("default")[0].cidr for a in addresses)
    assert all(w.tags == ("pm-cluster",) and w.external_ip is not None for w in workers)
    # The API's defaults: the default network, internal addresses only, no tags.
    plain = build_vpc(compute.state, [tpu("slice-1", 1)], INTERNET).host(f"tpu:{ZONE}/slice-1/0")
    assert (plain.network, plain.external_ip, plain.tags) == ("default", None, ())


def test_every_vm_keeps_its_addresses_when_others_come_and_go():
    compute, instances = project()
    for name in ("a", "b", "c"):
        vm(instances, name)
    nodes = [tpu("slice-0", 2, NodeNetwork(enable_external_ips=True))]
    first = build_vpc(compute.state, nodes, INTERNET)
    del compute.state.instances[f"{ZONE}/a"]
    vm(instances, "d")
    nodes.append(tpu("slice-1", 1))
    second = build_vpc(compute.state, nodes, INTERNET, first)
    for kept in (f"instance:{ZONE}/b", f"instance:{ZONE}/c", f"tpu:{ZONE}/slice-0/0", f"tpu:{ZONE}/slice-0/1"):
        assert second.host(kept) == first.host(kept)
    internal = [h.internal_ip for h in second.hosts]
    external = [h.external_ip for h in second.hosts if h.external_ip]
    assert len(set(internal)) == len(internal) and len(set(external)) == len(external)
    assert second.edges == first.edges


def test_cloud_nat_and_private_google_access_mark_their_subnetworks():
    compute, instances = project()
    vm(instances, "a")
    compute.set_private_ip_google_access(REGION, "default", True)
    compute.insert_router(Router(name="listed", region=REGION, network="default",
                                 nats=[Nat(name="nat", source_subnetwork_ip_ranges_to_nat=NAT_LISTED_SUBNETWORKS,
                                           subnetworks=["elsewhere"])]))
    vpc = build_vpc(compute.state, [], INTERNET)
    assert vpc.subnets_of("default")[0].private_google_access and not vpc.subnets_of("default")[0].cloud_nat
    compute.insert_router(Router(name="all", region=REGION, network="default", nats=[Nat(name="nat")]))
    vpc = build_vpc(compute.state, [], INTERNET, vpc)
    assert vpc.subnets_of("default")[0].cloud_nat
    assert {n.key for n in vpc.nats} == {f"nat:{REGION}/listed", f"nat:{REGION}/all"}
    assert all(n.address in INTERNET.external_pool() for n in vpc.nats)


def test_a_vm_in_a_subnetwork_that_does_not_exist_is_named():
    compute, _ = project()
    node = tpu("slice-0", 1, NodeNetwork(subnetwork="projects/p/regions/r/subnetworks/absent"))
    compute.subnetworks(REGION)
    with pytest.raises(NetworkModelError, match=f"tpu:{ZONE}/slice-0/0: network 'default' has no subnetwork 'absent'"):
        build_vpc(compute.state, [node], INTERNET)


def test_the_internet_and_the_home_lan_lie_in_the_benchmarking_range():
    assert INTERNET.cidr == ip_network("198.18.7.0/24") and INTERNET.home_lan == ip_network("198.19.7.0/24")
    assert INTERNET.laptop_public in INTERNET.cidr and INTERNET.laptop_lan in INTERNET.home_lan
    assert INTERNET.laptop_public not in INTERNET.external_pool()
