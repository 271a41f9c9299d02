"""The join reads its TPU identity from the VM's metadata server (issue 37): the slice name
Ray labels the node with is the TPU node's name, as on a real VM, with no TPU_* set by the
simulator."""

from __future__ import annotations

import pytest

from podmanager.cloud.base import NodeRequest
from podmanager.core.clock import FakeClock
from podmanager.core.spec import Capacity
from podmanager.emulator.metadata import MetadataServers
from podmanager.emulator.sim.cloud import SimCloud
from podmanager.vm import tpu_identity


@pytest.fixture
def metadata(tmp_path, monkeypatch):
    sim = SimCloud(clock=FakeClock(), create_latency_s=0.0)
    sim.create_node("z", "train-s1", NodeRequest("v4-16", "rt", Capacity.SPOT))
    servers = MetadataServers(sim)
    port = servers.start(zone="z", node="train-s1", worker=1, accelerator="v4-16",
                         endpoints=["10.0.0.1", "10.0.0.2"], megascale_file=tmp_path / "megascale.json")
    monkeypatch.setenv("GCE_METADATA_IP", f"127.0.0.1:{port}")
    yield
    servers.stop_all()


def test_the_identity_comes_from_the_metadata_server(metadata):
    assert tpu_identity.from_metadata() == {
        "TPU_NAME": "train-s1", "TPU_WORKER_ID": "1", "TPU_ACCELERATOR_TYPE": "v4-16", "TPU_TOPOLOGY": "2x2x2",
        "TPU_WORKER_HOSTNAMES": "10.0.0.1,10.0.0.2"}


def test_a_machine_whose_metadata_names_no_tpu_gets_none(monkeypatch):
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:9")  # nothing listens there
    assert tpu_identity.from_metadata() == {}


def test_both_forms_of_the_worker_endpoints_and_the_topology():
    assert tpu_identity.worker_hostnames("a:b:10.0.0.1,a:b:10.0.0.2") == ["10.0.0.1", "10.0.0.2"]
    assert tpu_identity.worker_hostnames("t1-w-0,t1-w-1") == ["t1-w-0", "t1-w-1"]
    assert tpu_identity.topology("TOPOLOGY: '4x4x4'\nWORKER_ID: '0'", "v4-16") == "4x4x4"
    assert tpu_identity.topology(None, "v4-16") == "2x2x2"
    assert tpu_identity.topology(None, "tpu7x-9") is None
