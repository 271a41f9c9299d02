"""A simulated TPU VM's metadata server answers like a real one: only with the
`Metadata-Flavor: Google` header, the VM's identity and its slice's workers, and notices that
follow the simulated cloud (also as a long poll)."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import pytest

from podmanager.cloud.base import NodeRequest, NodeState
from podmanager.core.clock import FakeClock
from podmanager.core.spec import Capacity
from podmanager.emulator.iam import tokens
from podmanager.emulator.metadata import MetadataServers
from podmanager.emulator.sim.cloud import SIMULATED_PROJECT_NUMBER, SimCloud
from podmanager.vm import notices


@pytest.fixture
def vm(tmp_path):
    sim = SimCloud(clock=FakeClock(), create_latency_s=0.0)
    sim.create_node("z", "c-s0", NodeRequest("v4-16", "rt", Capacity.SPOT, metadata={"enable-guest-attributes": "TRUE"}))
    megascale = tmp_path / "megascale.json"
    servers = MetadataServers(sim)
    port = servers.start(zone="z", node="c-s0", worker=1, accelerator="v4-16", endpoints=["10.0.0.1", "10.0.0.2"],
                         megascale_file=megascale)
    yield sim, f"http://127.0.0.1:{port}/computeMetadata/v1/", megascale
    servers.stop_all()


def get(url: str, *, header: bool = True) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Metadata-Flavor": "Google"} if header else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_without_the_metadata_flavor_header_it_answers_403_as_the_real_one(vm):
    _, base, _ = vm
    assert get(base + "instance/attributes/agent-worker-number", header=False)[0] == 403
    assert get(base + "instance/attributes/agent-worker-number") == (200, "1")


def test_it_serves_what_a_tpu_vm_serves(vm):
    _, base, megascale = vm
    assert get(base + "instance/attributes/worker-network-endpoints") == (200, "10.0.0.1,10.0.0.2")
    assert get(base + "instance/attributes/accelerator-type") == (200, "v4-16")
    assert get(base + "instance/hostname") == (200, "c-s0-w-1")
    assert get(base + "instance/id")[1].isdigit()
    assert get(base + "instance/nothing-here")[0] == 404
    assert "MEGASCALE" not in get(base + "instance/attributes/tpu-env")[1]
    megascale.write_text('{"MEGASCALE_NUM_SLICES": "2", "MEGASCALE_SLICE_ID": "1"}')  # a multislice run started
    tpu_env = get(base + "instance/attributes/tpu-env")[1]
    assert "MEGASCALE_NUM_SLICES: '2'\n" in tpu_env and "MEGASCALE_SLICE_ID: '1'\n" in tpu_env


def test_notices_follow_the_simulated_cloud_and_reach_the_notice_watch(vm):
    sim, base, _ = vm
    assert get(base + "instance/preempted") == (200, "FALSE")
    assert notices.metadata_notice(base + "instance/") is None
    sim.preempt("z", "c-s0", notice_s=30)
    assert get(base + "instance/preempted") == (200, "TRUE")
    assert notices.metadata_notice(base + "instance/") == "preempted"
    sim.clear_faults()


def test_upcoming_maintenance_is_served_as_gce_documents_it_and_fires_the_notice(vm):
    sim, base, _ = vm
    assert get(base + "instance/upcoming-maintenance?alt=json") == (200, "{}")  # nothing announced
    assert notices.metadata_notice(base + "instance/") is None
    now = sim.clock.now()
    sim.schedule_maintenance("z", "c-s0", after_s=3600, duration_s=120)
    status, body = get(base + "instance/upcoming-maintenance?alt=json")
    announced = json.loads(body)
    assert status == 200 and announced["maintenance_status"] == "PENDING"
    assert set(announced) >= {"window_start_time", "window_end_time", "type", "can_reschedule"}
    # An hour ahead is too early to stop the program; within the lead it is told.
    assert notices.metadata_notice(base + "instance/", now=now) is None
    notice = notices.metadata_notice(base + "instance/", now=now + 3600 - notices.MAINTENANCE_LEAD_S)
    assert notice is not None and notice.startswith("maintenance:") and "PENDING" in notice
    sim.clock.advance(3600)  # the window opens: the slice is REPAIRING, the maintenance ONGOING
    assert json.loads(get(base + "instance/upcoming-maintenance?alt=json")[1])["maintenance_status"] == "ONGOING"
    assert "ONGOING" in (notices.metadata_notice(base + "instance/", now=now) or "")
    sim.clock.advance(120)  # done: READY, nothing announced
    assert get(base + "instance/upcoming-maintenance?alt=json") == (200, "{}")
    assert get(base + "instance/maintenance-event") == (200, "NONE")  # never filled on a TPU VM


def test_the_maintenance_fault_announces_it_on_the_node_holding_the_slice(tmp_path):
    from podmanager.cloud.base import CLUSTER_LABEL, SLICE_LABEL
    from podmanager.core import faults

    sim = SimCloud(clock=FakeClock(), create_latency_s=0.0)
    sim.create_node("z", "c-s1", NodeRequest("v4-8", "rt", labels={CLUSTER_LABEL: "c", SLICE_LABEL: "1"}))
    servers = MetadataServers(sim)
    port = servers.start(zone="z", node="c-s1", worker=0, accelerator="v4-8", endpoints=["10.0.0.1"],
                         megascale_file=tmp_path / "megascale.json")
    base = f"http://127.0.0.1:{port}/computeMetadata/v1/"
    try:
        faults.parse("maintenance:1:0:5m:1m").apply(sim, cluster="c")  # as 'podmanager sim inject' sends it
        announced = json.loads(get(base + "instance/upcoming-maintenance?alt=json")[1])
        assert announced["maintenance_status"] == "PENDING"
        assert notices.metadata_notice(base + "instance/") is not None  # 5 min ahead: within the lead
        sim.clock.advance(300)
        assert [n.state for n in sim.list_nodes("z")] == [NodeState.REPAIRING]
        sim.clock.advance(60)
        assert [n.state for n in sim.list_nodes("z")] == [NodeState.READY]
        assert get(base + "instance/upcoming-maintenance?alt=json") == (200, "{}")
    finally:
        servers.stop_all()


def test_a_repair_is_ongoing_maintenance(vm):
    sim, base, _ = vm
    sim.repair("z", "c-s0", duration_s=60)
    assert json.loads(get(base + "instance/upcoming-maintenance?alt=json")[1])["maintenance_status"] == "ONGOING"
    assert "ONGOING" in (notices.metadata_notice(base + "instance/") or "")


def test_wait_for_change_answers_when_the_value_changes(vm, monkeypatch):
    sim, base, _ = vm
    holding = threading.Event()  # the server waits for a change: it found the value unchanged
    wait_for_change = sim.wait_for_change

    def held(version: int, timeout_s: float) -> None:
        holding.set()
        wait_for_change(version, timeout_s)

    monkeypatch.setattr(sim, "wait_for_change", held)
    answers: list[tuple[float, tuple[int, str]]] = []
    started = time.monotonic()
    waiter = threading.Thread(target=lambda: answers.append(
        (time.monotonic() - started, get(base + "instance/preempted?wait_for_change=true&timeout_sec=20"))))
    waiter.start()
    assert holding.wait(timeout=10), "the long poll never waited for a change"
    assert answers == []  # held: it answers only after a change (or its 20 s)
    sim.preempt("z", "c-s0", notice_s=30)
    waiter.join(timeout=10)
    assert answers and answers[0][1] == (200, "TRUE") and answers[0][0] < 10


def test_the_notice_watch_finds_a_simulated_vms_own_server(monkeypatch):
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:8123")
    assert notices.metadata_url() == "http://127.0.0.1:8123/computeMetadata/v1/instance/"
    monkeypatch.delenv("GCE_METADATA_IP")
    assert notices.metadata_url() == notices.METADATA_URL


def test_a_vm_writes_guest_attributes_that_the_api_reads(vm):
    sim, base, _ = vm
    request = urllib.request.Request(base + "instance/guest-attributes/podmanager/boot", data=b"joined",
                                     method="PUT", headers={"Metadata-Flavor": "Google"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200
    assert get(base + "instance/guest-attributes/podmanager/boot") == (200, "joined")
    [written] = sim.guest_attributes("z", "c-s0", "podmanager/")
    assert (written.worker, written.key, written.value) == (1, "boot", "joined")
    refused = urllib.request.Request(base + "instance/hostname", data=b"x", method="PUT",
                                     headers={"Metadata-Flavor": "Google"})
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(refused, timeout=10)
    assert error.value.code == 405


def test_it_serves_the_nodes_metadata_the_project_and_a_service_account_token(tmp_path):
    """What the startup script reads: its own text, the head's address as it is now (UpdateNode
    changes it), the project, and a token standing for the VM's service account."""
    sim = SimCloud("my-proj", clock=FakeClock(), create_latency_s=0.0)
    sim.create_node("z", "c-s0", NodeRequest("v4-8", "rt", Capacity.SPOT,
                                             metadata={"startup-script": "#!/bin/bash\n", "podmanager-head": "h:1"}))
    servers = MetadataServers(sim)
    base = f"http://127.0.0.1:{servers.start(zone='z', node='c-s0', worker=0, accelerator='v4-8', endpoints=['x'], megascale_file=tmp_path / 'm')}/computeMetadata/v1/"
    try:
        assert get(base + "instance/attributes/startup-script") == (200, "#!/bin/bash\n")
        assert get(base + "instance/attributes/podmanager-head") == (200, "h:1")
        assert get(base + "instance/attributes/nothing")[0] == 404
        assert get(base + "project/project-id") == (200, "my-proj")
        email = get(base + "instance/service-accounts/default/email")[1]
        assert email == f"{SIMULATED_PROJECT_NUMBER}-compute@developer.gserviceaccount.com"
        issued = json.loads(get(base + "instance/service-accounts/default/token")[1])["access_token"]
        assert tokens.principal_of(issued) == f"serviceAccount:{email}"  # the emulator knows the VM by it
        sim.update_node_metadata("z", "c-s0", {"startup-script": "#!/bin/bash\n", "podmanager-head": "h:2"})
        assert get(base + "instance/attributes/podmanager-head") == (200, "h:2")
    finally:
        servers.stop_all()


def test_a_tpu_vm_without_enable_guest_attributes_may_not_write_them(tmp_path):
    sim = SimCloud(clock=FakeClock(), create_latency_s=0.0)
    sim.create_node("z", "c-s0", NodeRequest("v4-8", "rt", Capacity.SPOT))
    servers = MetadataServers(sim)
    port = servers.start(zone="z", node="c-s0", worker=0, accelerator="v4-8", endpoints=["10.0.0.1"],
                         megascale_file=tmp_path / "megascale.json")
    try:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/computeMetadata/v1/instance/guest-attributes/"
                                         "podmanager/boot", data=b"joined", method="PUT",
                                         headers={"Metadata-Flavor": "Google"})
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(request, timeout=10)
        assert (error.value.code, error.value.read().decode()) == (403, "Guest attributes endpoint access is disabled.\n")
        assert sim.guest_attributes("z", "c-s0", "podmanager/") == []
    finally:
        servers.stop_all()


def test_google_auth_reads_its_project_account_and_token_from_it(vm, monkeypatch):
    """What google-auth asks a GCE metadata server, as it asks it: a 200 at the root (its ping),
    the account whole as JSON, then a token (JSON only when the answer says it is)."""
    from google.auth.compute_engine import _metadata
    from google.auth.compute_engine.credentials import Credentials
    from google.auth.transport.requests import Request

    _, base, _ = vm
    address = base.split("/")[2]
    # This test's server is on loopback, not 169.254.169.254 (test_vm_network.py asks the real one).
    monkeypatch.setenv("GCE_METADATA_IP", address)
    monkeypatch.setattr(_metadata, "_GCE_METADATA_HOST", address)  # read once, at import
    request = Request()
    assert _metadata.ping(request)
    credentials = Credentials()
    credentials.refresh(request)
    email = f"{SIMULATED_PROJECT_NUMBER}-compute@developer.gserviceaccount.com"
    assert credentials.service_account_email == email
    assert tokens.principal_of(credentials.token) == f"serviceAccount:{email}"
