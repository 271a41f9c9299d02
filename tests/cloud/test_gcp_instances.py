"""Waiting for a Compute Engine operation as Google answers `zoneOperations.wait`: it returns
when the operation is DONE or near its 2-minute deadline, whichever is first, maybe not DONE.
The emulator holds a wait until then (its deadline shortened here, and an instance's insert
lengthened past it); the client loops on the wait until its own timeout, whatever its ordinary
call timeout and retry deadline (30 s and 60 s for real, below Google's 2 minutes: scaled down
here as 0.3 s and 1 s against a 1 s wait)."""

from __future__ import annotations

import time

import pytest
from google.api_core.client_options import ClientOptions
from google.cloud import compute_v1

from podmanager.cloud.base import CLUSTER_LABEL
from podmanager.cloud.gcp import emulator_identity
from podmanager.cloud.gcp.instances import ComputeInstances
from podmanager.cloud.instances import Instance
from podmanager.emulator.server import Emulator

PROJECT = "p-waits"
ZONE = "sim-zone-a"
WAIT_DEADLINE_S = 1.0
INSERT_S = 3.0  # longer than a wait: one wait cannot see it done


@pytest.fixture
def emulator():
    served = Emulator(PROJECT, persist=False)
    served.sim.configure_cluster("w", 0.5, 0.1, instance_create_latency_s=INSERT_S, instance_delete_latency_s=INSERT_S)
    served.compute.wait_deadline_s = WAIT_DEADLINE_S
    served.serve_rest()
    yield served
    served.stop()


def vm(name: str) -> Instance:
    return Instance(name=name, zone=ZONE, machine_type="e2-standard-2", labels={CLUSTER_LABEL: "w"})


def test_a_wait_returns_the_operation_undone_at_its_deadline(emulator):
    options = {"credentials": emulator_identity.credentials(),
               "client_options": ClientOptions(api_endpoint=f"http://127.0.0.1:{emulator.rest_port}")}
    instances, operations = compute_v1.InstancesClient(**options), compute_v1.ZoneOperationsClient(**options)
    started = instances.insert_unary(project=PROJECT, zone=ZONE, instance_resource=compute_v1.Instance(
        name="slow", machine_type=f"zones/{ZONE}/machineTypes/e2-standard-2",
        network_interfaces=[compute_v1.NetworkInterface(network="global/networks/default")]))
    before = time.monotonic()
    waited = operations.wait(project=PROJECT, zone=ZONE, operation=started.name)
    assert waited.status == compute_v1.Operation.Status.RUNNING  # not DONE: the deadline came first
    assert time.monotonic() - before >= WAIT_DEADLINE_S  # held until the deadline, not answered at once
    assert operations.wait(project=PROJECT, zone=ZONE, operation=started.name).status in (
        compute_v1.Operation.Status.RUNNING, compute_v1.Operation.Status.DONE)
    assert len(emulator.api.requests_of("compute.zoneOperations.wait")) == 2  # each wait logged once


def test_the_client_waits_past_a_wait_s_deadline_until_its_own_timeout(emulator):
    with ComputeInstances(PROJECT, endpoint=f"http://127.0.0.1:{emulator.rest_port}", call_timeout_s=0.3,
                          retry_deadline_s=1.0, retry_initial_s=0.05, poll_interval_s=0.05) as instances:
        instances.create(vm("c-controller"), timeout_s=30)
        assert instances.get(ZONE, "c-controller").status == "RUNNING"
        assert len(emulator.api.requests_of("compute.zoneOperations.wait")) >= 2  # one wait was not enough
