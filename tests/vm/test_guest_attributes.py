"""A VM's guest attributes as it writes them (`vm/guest_attributes.py`, through `boot_status`):
Google takes at most 10 writes a minute per VM, in bursts of 3 a second, and drops the rest;
the emulator's metadata server drops them too. A boot's reports all land: a value is written
only when it changed, and held back until it fits the rate."""

from __future__ import annotations

import logging

import pytest

from podmanager.cloud.instances import Instance
from podmanager.emulator.instance_metadata import InstanceFacts
from podmanager.emulator.metadata import MetadataServers
from podmanager.emulator.sim.cloud import SimCloud
from podmanager.emulator.sim.instances import SimInstances
from podmanager.vm import boot_status, guest_attributes

ZONE, NAME = "sim-zone-a", "c-controller"


@pytest.fixture
def vm(tmp_path, monkeypatch):
    """An instance with guest attributes on, its metadata server on the real clock, and this
    process as a process of that VM (its root folder, its metadata server)."""
    sim = SimCloud("p-guest")
    with sim.compute() as project:
        SimInstances(project).insert(Instance(name=NAME, zone=ZONE, machine_type="e2-standard-2",
                                              metadata={"enable-guest-attributes": "TRUE"}))
    servers = MetadataServers(sim)
    port = servers.serve_vm(f"instances/{ZONE}/{NAME}", InstanceFacts(sim=sim, zone=ZONE, name=NAME))
    monkeypatch.setenv("GCE_METADATA_IP", f"127.0.0.1:{port}")
    monkeypatch.delenv("PODMANAGER_METADATA_URL", raising=False)
    monkeypatch.setenv("PODMANAGER_ROOT", str(tmp_path))
    yield sim
    servers.stop_all()


def written(sim: SimCloud) -> dict[str, str]:
    with sim.compute() as project:
        return {key: value for _, key, value in SimInstances(project).guest_attributes(ZONE, NAME, "podmanager/")}


def test_a_boots_reports_all_land_within_googles_rate(vm, caplog):
    caplog.set_level(logging.WARNING, logger="podmanager.emulator.metadata")
    boot_status.report("installing")
    boot_status.put_attribute("versions", "python=3.11.7 ray=2.60.0")
    boot_status.report("token")
    boot_status.report("joining")
    boot_status.report("joining", "head 10.0.0.1:6379")
    boot_status.report(boot_status.JOINED)
    assert "dropped" not in caplog.text
    assert written(vm) == {"boot": "joined", "boot-detail": "", "versions": "python=3.11.7 ray=2.60.0"}


def test_an_unchanged_value_is_not_written_again(vm, monkeypatch):
    puts = []
    real_put = guest_attributes.put
    monkeypatch.setattr(guest_attributes, "put", lambda key, value: puts.append((key, value)) or real_put(key, value))
    for _ in range(20):  # a join restarted in a loop reports the same stage each time
        boot_status.report("error", "the head refused this host")
    assert puts == [("boot", "error"), ("boot-detail", "the head refused this host")]


def test_the_wait_keeps_within_three_a_second_and_ten_a_minute():
    assert guest_attributes.wait_s([], 100.0) == 0
    assert guest_attributes.wait_s([99.5, 99.9], 100.0) == 0
    assert guest_attributes.wait_s([99.5, 99.8, 99.9], 100.0) == pytest.approx(0.6)  # the first of three + 1.1 s
    minute = [50.0 + n for n in range(10)]  # ten in the last minute, the oldest at 50 s
    assert guest_attributes.wait_s(minute, 100.0) == pytest.approx(11.0)  # 50 + 61 - 100
