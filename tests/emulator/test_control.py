"""The emulator as other processes see it: fault specs, the control service, `podmanager emulator`."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from podmanager.cloud import errors
from podmanager.cloud.base import NodeRequest, NodeState
from podmanager.cloud.gcp.client import GcpCloud
from podmanager.core.clock import FakeClock
from podmanager.core.errors import SpecError
from podmanager.core.spec import Capacity
from podmanager.emulator.control import EmulatorControl, apply_fault
from podmanager.emulator.sim.cloud import SimCloud
from podmanager.emulator.tpu_api import TpuEmulator, serve

REQUEST = NodeRequest("v4-8", "tpu-ubuntu2204-base", Capacity.SPOT, labels={"podmanager-cluster": "demo"})


@pytest.fixture
def served() -> Iterator[tuple[SimCloud, TpuEmulator, str]]:
    sim = SimCloud(clock=FakeClock(), create_latency_s=10.0)
    emulator = TpuEmulator(sim)
    server, port = emulator.serve()
    try:
        yield sim, emulator, f"127.0.0.1:{port}"
    finally:
        server.stop(grace=None).wait()


@pytest.mark.parametrize("spec", ["capacity", "capacity:", "capacity:z:x", "capacity:z:0", "quota:a:b:c", "quota::-1",
                                  "transient:many", "flood:z", "clear:z"])
def test_bad_fault_specs_are_refused(spec: str) -> None:
    with pytest.raises(SpecError, match=f"^fault: {spec!r}: "):
        apply_fault(SimCloud(clock=FakeClock()), spec)


def test_fault_specs_reach_the_simulator() -> None:
    sim = SimCloud(clock=FakeClock(), create_latency_s=0.0)
    apply_fault(sim, "capacity:zone-b")  # once, as everywhere a fault is written
    assert isinstance(sim.get_operation(sim.create_node("zone-b", "m", REQUEST).name).error, errors.CapacityError)
    assert sim.get_operation(sim.create_node("zone-b", "m", REQUEST).name).error is None
    apply_fault(sim, "capacity:zone-a:2")
    apply_fault(sim, "quota:TPUV5sLitepodPerZone")
    with pytest.raises(errors.QuotaError) as raised:
        sim.create_node("zone-b", "n", REQUEST)
    assert raised.value.quota == "TPUV5sLitepodPerZone"
    for _ in range(2):
        assert isinstance(sim.get_operation(sim.create_node("zone-a", "n", REQUEST).name).error, errors.CapacityError)
    sim.get_operation(sim.create_node("zone-a", "n", REQUEST).name)  # third create: the fault is used up
    apply_fault(sim, "transient:2")
    apply_fault(sim, "clear")
    assert [n.name for n in sim.list_nodes("zone-a")] == ["n"]


def test_serve_returns_a_running_server_and_its_port() -> None:
    server, port = serve(SimCloud(clock=FakeClock()))
    try:
        with GcpCloud("p", emulator_host=f"127.0.0.1:{port}") as cloud:
            assert cloud.list_nodes("zone-a") == []
    finally:
        server.stop(grace=None).wait()


def test_faults_set_from_another_process(served: tuple[SimCloud, TpuEmulator, str]) -> None:
    sim, _, address = served
    subprocess.run(
        [sys.executable, "-m", "podmanager.emulator.control", "inject", address, "quota:TPUV4PodPerZone", "capacity:zone-a"],
        check=True, timeout=60,
    )
    with GcpCloud("p", emulator_host=address, clock=sim.clock, poll_interval_s=1.0) as cloud:
        with pytest.raises(errors.QuotaError, match="TPUV4PodPerZone"):
            cloud.create_node("zone-a", "demo-s0", REQUEST)
        failed = cloud.wait(cloud.create_node("zone-a", "demo-s0", REQUEST), timeout_s=60)
        assert isinstance(failed.error, errors.CapacityError)
        assert cloud.wait(cloud.create_node("zone-b", "demo-s0", REQUEST), timeout_s=60).error is None
    listed = subprocess.run(
        [sys.executable, "-m", "podmanager.emulator.control", "nodes", address],
        check=True, timeout=60, capture_output=True, text=True,
    )
    (node,) = json.loads(listed.stdout)
    assert (node["name"], node["zone"], node["state"], node["capacity"]) == ("demo-s0", "zone-b", "READY", "spot")


def test_control_client_preempts_and_reads_the_request_log(served: tuple[SimCloud, TpuEmulator, str]) -> None:
    sim, _, address = served
    with GcpCloud("p", emulator_host=address, clock=sim.clock) as cloud, EmulatorControl(address) as control:
        cloud.wait(cloud.create_node("zone-a", "demo-s0", REQUEST), timeout_s=60)
        control.preempt("zone-a", "demo-s0")
        assert cloud.get_node("zone-a", "demo-s0").state is NodeState.PREEMPTED
        (logged,) = control.requests("CreateNode")
        assert logged["request"]["node"]["scheduling_config"] == {"spot": True}
        control.inject_transient(1)
        assert cloud.get_node("zone-a", "demo-s0").state is NodeState.PREEMPTED  # retried through it
        with pytest.raises(Exception, match="unknown control method"):
            control.call("format_disk")


def test_control_client_preempts_a_cluster_slice_later(served: tuple[SimCloud, TpuEmulator, str]) -> None:
    sim, _, address = served
    with GcpCloud("p", emulator_host=address, clock=sim.clock) as cloud, EmulatorControl(address) as control:
        request = NodeRequest("v4-8", "tpu-ubuntu2204-base", Capacity.SPOT,
                              labels={"podmanager-cluster": "demo", "podmanager-slice": "0"})
        cloud.wait(cloud.create_node("zone-a", "demo-s0", request), timeout_s=60)
        control.fault("preempt:0:30", cluster="demo")
        with pytest.raises(Exception, match="names a slice of a cluster"):
            control.fault("preempt:0")  # which cluster's slice 0?
        sim.clock.advance(29)
        assert cloud.get_node("zone-a", "demo-s0").state is NodeState.READY
        sim.clock.advance(1)
        assert cloud.get_node("zone-a", "demo-s0").state is NodeState.PREEMPTED


def ignoring_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a non-interactive shell starts background jobs


@pytest.mark.parametrize("stop_with, start_with", [(signal.SIGINT, None), (signal.SIGINT, ignoring_sigint),
                                                   (signal.SIGTERM, None)])
def test_emulator_command_serves_until_interrupted(stop_with, start_with) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "podmanager", "emulator", "--port", "0", "--create-latency-s", "0.01",
         "--fault", "capacity:zone-a"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=start_with,
    )
    try:
        address = None
        assert process.stdout is not None
        for line in process.stdout:  # blocks until the command has printed its address
            if line.startswith("export TPU_EMULATOR_HOST="):
                address = line.strip().split("=", 1)[1]
                break
        assert address and address.startswith("127.0.0.1:"), process.stderr.read() if process.stderr else ""
        with GcpCloud("p", emulator_host=address, poll_interval_s=0.02, call_timeout_s=10) as cloud:
            assert isinstance(cloud.wait(cloud.create_node("zone-a", "s0", REQUEST), timeout_s=30).error, errors.CapacityError)
            assert cloud.wait(cloud.create_node("zone-b", "s0", REQUEST), timeout_s=30).error is None
            assert cloud.get_node("zone-b", "s0").state is NodeState.READY
        process.send_signal(stop_with)
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_emulator_command_refuses_a_busy_port() -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "podmanager", "emulator", "--port", str(port)],
                                capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    said = " ".join(result.stderr.replace("│", " ").split())  # rich may wrap the message in a box
    assert "--port" in said and "in use" in said
