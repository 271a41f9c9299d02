"""Fast tests of the host-side pieces that need no Ray cluster."""

from __future__ import annotations

import fcntl
import os
import stat
import time

import pytest
from ray_fixtures import create_ready_nodes, ray_like

from podmanager.controller import fleet, head
from podmanager.controller.host_controller import HostController
from podmanager.core.clock import FakeClock
from podmanager.core.errors import PodmanagerError
from podmanager.core.spec import parse_spec
from podmanager.emulator import vms
from podmanager.emulator.sim.cloud import SimCloud
from podmanager.vm import auth, join, loopback, probe, ray_node


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("PODMANAGER_HOME", str(tmp_path))
    return tmp_path


def test_token_created_once_with_0600(home):
    path = auth.ensure_token("c1")
    first = path.read_text()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(first) == 64
    assert auth.ensure_token("c1").read_text() == first
    env = auth.child_env(path, {"RAY_AUTH_TOKEN": "stale", "X": "1"})
    assert env == {"X": "1", "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(path)}


def test_loopback_detection():
    assert loopback.is_loopback("127.0.0.1:6379") and loopback.is_loopback("localhost:1")
    assert not loopback.is_loopback("10.0.0.2:6379")


def test_ray_start_args():
    args = join.ray_start_args(
        "127.0.0.1:1", resources={"TPU": 4}, num_cpus=1, object_store_memory=80, temp_dir="/tmp/pm-x", agent_port=5
    )
    assert "--dashboard-agent-listen-port=5" in args
    assert args[:2] == ["start", "--address=127.0.0.1:1"]
    assert '--resources={"TPU": 4}' in args and "--temp-dir=/tmp/pm-x" in args


def test_join_gives_up_at_its_deadline_when_head_is_unreachable():
    started = time.monotonic()
    assert join.main(["--address", "127.0.0.1:9", "--deadline", "0.5"]) == join.EXIT_HEAD_UNREACHABLE
    assert time.monotonic() - started < 5


def test_probe_sees_a_held_libtpu_lock(tmp_path):
    lockfile = tmp_path / "libtpu_lockfile"
    assert probe.lock_holder(str(lockfile)) is None
    lockfile.write_text("")
    assert probe.lock_holder(str(lockfile)) is None  # stale file, nobody holds it
    pid = os.fork()
    if pid == 0:  # a "stray process" holding the chips
        fd = os.open(lockfile, os.O_RDWR)
        fcntl.lockf(fd, fcntl.LOCK_EX)
        time.sleep(3)
        os._exit(0)
    try:
        deadline = time.monotonic() + 2
        holder = None
        while holder is None and time.monotonic() < deadline:
            holder = probe.lock_holder(str(lockfile))
            time.sleep(0.05)
        assert holder is not None
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)


def test_probe_result_health():
    good = probe.probe_host(4, simulated=True)
    assert good.healthy and good.detail == "ok"
    bad = probe.ProbeResult(True, 4, 0, "pid 1 (x)", 1, 1, 0.0)
    assert not bad.healthy and "0 of 4 chips" in bad.detail and "pid 1" in bad.detail


def test_boot_hosts_false_boots_nothing(home):
    spec = parse_spec(
        {"name": "noboot", "backend": "simulated", "slices": [{"accelerator": "v4-16"}],
         "simulation": {"boot_hosts": False}}
    )
    controller = HostController(spec, vms.SimulatedMachines())
    assert controller.node_metadata() == {}
    before = ray_like()
    clock = FakeClock()
    cloud = SimCloud(clock=clock, listeners=[vms.SimHostBooter()])
    nodes = create_ready_nodes(cloud, clock, "noboot", ["v4-16"], controller.node_metadata())
    assert nodes[0].state.value == "READY"
    time.sleep(0.5)
    assert vms.host_records("noboot") == []
    assert ray_like() - before == set()
    assert controller.hosts() == []  # no head: nothing to report
    controller.stop()  # idempotent, nothing to stop


def test_node_metadata_needs_a_head(home):
    spec = parse_spec({"name": "nohead", "backend": "simulated", "slices": [{"accelerator": "v4-8"}]})
    with pytest.raises(PodmanagerError):
        HostController(spec, vms.SimulatedMachines()).node_metadata()


def test_agent_names():
    assert fleet.agent_name("demo", 1, 0) == "pm-demo-1-0"


def head_health_checks(spec) -> dict:
    import json

    from podmanager.controller import head

    command = head.head_command(spec, "10.0.0.2", 6379, 8265, 10001, 52365)
    return json.loads(next(c for c in command if c.startswith("--system-config=")).split("=", 1)[1])


def test_the_heads_ports_are_all_different_whatever_the_kernel_hands_out(monkeypatch):
    # Probes on different addresses, each closed before the next, may be handed one port twice
    # (seen: the dashboard's and the dashboard agent's), and Ray then refuses to start.
    handed = iter([40001, 40001, 6379, 40002, 40003])

    class Probe:
        def __init__(self) -> None:
            self.port = 0

        def __enter__(self):  # type: ignore[no-untyped-def]
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def bind(self, address: tuple[str, int]) -> None:
            self.port = next(handed)

        def getsockname(self) -> tuple[str, int]:
            return ("127.0.0.1", self.port)

    monkeypatch.setattr(ray_node.socket, "socket", Probe)
    assert ray_node.free_ports("127.0.0.1", "", "127.0.0.1", avoid=(6379,)) == [40001, 40002, 40003]


def test_free_ports_hold_their_probes_until_every_port_is_chosen():
    ports = ray_node.free_ports("127.0.0.1", "", "127.0.0.1", "")
    assert len(set(ports)) == 4


def test_head_command_has_a_small_store_and_no_token(home):
    from podmanager.controller import head

    spec = parse_spec({"name": "h", "project": "my-project", "zones": ["z"], "slices": [{"accelerator": "v4-8"}],
                       "head": {"dashboard_host": "127.0.0.1"}})
    command = head.head_command(spec, "10.0.0.2", 6379, 8265, 10001, 52365)
    assert command[3:5] == ["start", "--head"]
    assert "--node-ip-address=10.0.0.2" in command and "--port=6379" in command
    assert "--dashboard-host=127.0.0.1" in command
    assert f"--object-store-memory={ray_node.OBJECT_STORE_BYTES}" in command
    assert not any(auth.token_path("h").exists() and auth.token_path("h").read_text() in c for c in command)


def test_a_simulated_head_detects_a_dead_host_in_about_a_second_and_a_half(home):
    spec = parse_spec({"name": "h", "backend": "simulated", "slices": [{"accelerator": "v4-8"}]})
    assert head_health_checks(spec) == {
        "health_check_period_ms": 500, "health_check_failure_threshold": 3, "health_check_timeout_ms": 500}


def test_a_gcp_head_keeps_rays_safe_defaults_so_a_pause_kills_no_slice(home):
    """Ray's own defaults (ray_config_def.h): 5 missed checks, every 3 s, each allowed 10 s."""
    spec = parse_spec({"name": "h", "project": "my-project", "zones": ["z"], "slices": [{"accelerator": "v4-8"}]})
    # A host whose process died is declared dead after ~15 s, one that went silent after ~1 min:
    # far past a GC pause or a network blip.
    assert head_health_checks(spec) == {"health_check_period_ms": 3000, "health_check_failure_threshold": 5,
                                        "health_check_timeout_ms": 10000}


def test_probe_failures_tell_unreachable_from_dead():
    from ray.exceptions import ActorDiedError, ActorUnavailableError, GetTimeoutError

    unavailable = ActorUnavailableError("node not answering", None)
    assert fleet.classify_failure(unavailable, joined=True, node_dead=False)[0] == fleet.UNREACHABLE
    assert fleet.classify_failure(unavailable, joined=True, node_dead=True)[0] == fleet.DEAD
    assert fleet.classify_failure(ActorDiedError(), joined=True, node_dead=False)[0] == fleet.DEAD
    assert fleet.classify_failure(GetTimeoutError(), joined=True, node_dead=False)[0] == fleet.UNRESPONSIVE
    assert fleet.classify_failure(GetTimeoutError(), joined=False, node_dead=False)[0] == fleet.JOINING
    assert fleet.classify_failure(None, joined=True, node_dead=True)[0] == fleet.DEAD
