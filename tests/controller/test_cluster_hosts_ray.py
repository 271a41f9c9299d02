"""ClusterHosts on a real local Ray cluster: a v4-16 (2 hosts) and a v4-8 (1 host),
booted as simulated TPU VMs by SimHostBooter. One cluster for the whole module."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import ray
from homes import restore, set_home, use_home
from ray_fixtures import (
    ZONE,
    booting_emulator,
    cluster_machines,
    create_ready_nodes,
    ray_like,
    wait_no_leftovers,
)

from podmanager.cloud.base import NodeRequest, NodeState
from podmanager.controller import fleet, head, snapshot
from podmanager.controller.cluster_hosts import ClusterHosts
from podmanager.core.clock import FakeClock, poll_until
from podmanager.core.spec import parse_spec
from podmanager.emulator import vms
from podmanager.vm import auth

CLUSTER = "hosttest"

pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    home = tmp_path_factory.mktemp("pmhome")
    saved = set_home(home)
    before = ray_like()
    spec = parse_spec(
        {"name": CLUSTER, "backend": "simulated", "slices": [{"accelerator": "v4-16"}, {"accelerator": "v4-8"}]}
    )
    controller = ClusterHosts(spec, vms.SimulatedMachines())
    clock = FakeClock()
    machines: set[str] = set()
    try:
        with booting_emulator(spec, clock) as (emulator, metadata):
            cloud = emulator.sim
            nodes = create_ready_nodes(cloud, clock, CLUSTER, ["v4-16", "v4-8"], metadata)
            started = time.monotonic()
            infos = controller.wait_for_hosts(nodes, timeout_s=120)
            controller.ensure_monitor()  # the plain host monitor: no cluster record here for the cloud's view
            machines = cluster_machines(CLUSTER)
            yield {"controller": controller, "cloud": cloud, "clock": clock, "nodes": nodes, "infos": infos,
                   "home": home, "spec": spec, "up_s": time.monotonic() - started, "booter": emulator.booter,
                   "metadata": metadata}
    finally:
        machines |= cluster_machines(CLUSTER)
        controller.stop_ray()
        left = wait_no_leftovers(machines, before, home=os.environ["PODMANAGER_HOME"])
        restore(saved)
        assert not left, f"Ray processes left after stop(): {left}"


@pytest.fixture(autouse=True)
def _module_home(env, podmanager_home, monkeypatch):
    """conftest gives every test its own home; these tests share the module's cluster."""
    use_home(monkeypatch, env["home"])


def test_every_host_has_an_agent_holding_its_chips(env):
    infos = env["infos"]
    assert [(h.slice_index, h.worker_id) for h in infos] == [(0, 0), (0, 1), (1, 0)]
    assert all(h.healthy and h.chips == 4 and h.ip == "127.0.0.1" and h.ray_node_id for h in infos)
    assert len({h.ray_node_id for h in infos}) == 3
    # Every chip of every host is held by its agent.
    for info in infos:
        agent = fleet.agent_handle(CLUSTER, info.slice_index, info.worker_id)
        details = ray.get(agent.info.remote(), timeout=10)
        assert details["ray_node_id"] == info.ray_node_id
        assert details["node_name"] == info.node_name and details["chips"] == 4
    tpu_nodes = [n for n in ray.nodes() if n["Alive"] and n["Resources"].get("TPU")]
    assert sorted(n["Resources"]["TPU"] for n in tpu_nodes) == [4, 4, 4]
    assert ray.available_resources().get("TPU", 0) == 0


def test_ray_sees_the_v4_16_as_one_slice(env):
    slice_name = env["nodes"][0].name
    hosts = ray.util.tpu.get_tpu_nodes_for_slice(slice_name)
    assert sorted(n["Labels"]["ray.io/tpu-worker-id"] for n in hosts) == ["0", "1"]
    assert ray.util.tpu.get_num_tpu_slices("2x2x2", "TPU-V4") == 1
    head_hosts = [n for n in hosts if n["Resources"].get("TPU-v4-16-head")]
    assert [n["Labels"]["ray.io/tpu-worker-id"] for n in head_hosts] == ["0"]


def test_probe_reports_host_facts(env):
    agent = fleet.agent_handle(CLUSTER, 0, 1)
    result = ray.get(agent.probe.remote(), timeout=10)
    assert result.alive and result.healthy and result.chips_visible == 4
    assert result.memory_free_bytes > 0 and result.disk_free_bytes > 0
    assert abs(result.timestamp - time.time()) < 30
    assert result.ray_node_id is not None and result.ip is not None  # where the agent answering is


def test_start_head_is_idempotent_and_hosts_are_not_booted_twice(env):
    controller = env["controller"]
    before = cluster_machines(CLUSTER)
    assert ClusterHosts(env["spec"], vms.SimulatedMachines()).start_head() == controller.start_head()
    assert env["booter"].boot(env["nodes"][0]) == []  # its hosts run: none is booted again
    assert cluster_machines(CLUSTER) == before
    assert len(controller.hosts()) == 3


def test_token_is_private_and_never_leaks(env):
    token_file = auth.token_path(CLUSTER)
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    token = token_file.read_text().strip()
    assert len(token) == 64
    assert all(token not in v for n in env["nodes"] for v in n.metadata.values())
    logs = list((env["home"] / "clusters" / CLUSTER).rglob("*.log"))
    ray_dirs = [head.load_state(CLUSTER).temp_dir] + [r["temp_dir"] for r in vms.host_records(CLUSTER)]
    ray_logs = [p for d in ray_dirs for p in Path(d).glob("session_*/logs/*") if p.is_file()]
    assert logs and len(ray_logs) > 10
    assert all(token not in p.read_text(errors="replace") for p in logs + ray_logs)
    for pid in ray_like():
        try:
            assert token not in " ".join(__import__("psutil").Process(pid).cmdline())
        except __import__("psutil").Error:
            pass


def test_head_refuses_a_driver_without_the_token(env, tmp_path):
    address = head.load_state(CLUSTER).address
    script = textwrap.dedent(
        f"""
        import ray
        from podmanager.vm import loopback
        with loopback.as_given({address!r}):
            ray.init(address={address!r}, _node_ip_address="127.0.0.1", log_to_driver=False)
        print("CONNECTED")
        """
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    clean["HOME"] = str(tmp_path)  # no ~/.ray/auth_token either
    clean["RAY_NUM_REDIS_GET_RETRIES"] = "2"  # fail in ~2 s instead of retrying for 20 s
    for extra in ({}, {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 64}):
        done = subprocess.run(
            [sys.executable, "-c", script], env={**clean, **extra}, capture_output=True, text=True, timeout=90
        )
        assert "CONNECTED" not in done.stdout
        assert done.returncode != 0
        assert "auth" in (done.stdout + done.stderr).lower()


def snapshot_states() -> dict[tuple[str, int], str] | None:
    """(node, worker) -> state in the monitor's snapshot, if it is fresh."""
    fresh = snapshot.read_fresh(CLUSTER)
    return {(h.node_name, h.worker_id): h.state for h in fresh[1]} if fresh else None


def test_the_monitor_keeps_a_fresh_snapshot_of_every_host(env):
    """The monitor the fixture started: its snapshot has every host as a live probe does."""
    live = {(h.node_name, h.worker_id): (h.state, h.ray_node_id) for h in env["controller"].hosts()}
    first = poll_until(lambda: snapshot.read_fresh(CLUSTER), timeout_s=30, interval_s=0.2, what="a snapshot")
    assert {(h.node_name, h.worker_id): (h.state, h.ray_node_id) for h in first[1]} == live
    assert len(live) == 3 and {state for state, _ in live.values()} == {fleet.HEALTHY}
    later = poll_until(lambda: (s := snapshot.read_fresh(CLUSTER)) and s[0] > first[0] and s, timeout_s=10,
                       interval_s=0.2, what="a newer snapshot")
    assert later[0] - first[0] < 5.0  # it keeps probing


def test_killed_host_is_seen_dead_within_3s(env):
    controller = env["controller"]
    assert controller.dead_hosts() == []
    node = env["nodes"][1]  # the v4-8
    ray_node_id = next(h.ray_node_id for h in env["infos"] if h.node_name == node.name)
    assert vms.kill_host(CLUSTER, node.name, 0)
    killed = time.monotonic()
    seen_dead = ray_dead = None
    while time.monotonic() - killed < 10 and ray_dead is None:
        dead = controller.dead_hosts()
        if seen_dead is None and any(h.node_name == node.name and h.state == fleet.DEAD for h in dead):
            seen_dead = time.monotonic() - killed
        if not next(n["Alive"] for n in ray.nodes() if n["NodeID"] == ray_node_id):
            ray_dead = time.monotonic() - killed
        time.sleep(0.05)
    assert seen_dead is not None and seen_dead < 3.0, f"dead_hosts() saw it after {seen_dead}s"
    # Ray's own verdict (tuned health checks) follows within a few seconds.
    assert ray_dead is not None and ray_dead < 6.0, f"Ray declared the node dead after {ray_dead}s"
    infos = {h.node_name: h for h in controller.hosts()}
    assert infos[node.name].state == fleet.DEAD and not infos[node.name].healthy
    others = [h for h in controller.hosts() if h.node_name != node.name]
    assert len(others) == 2 and all(h.healthy for h in others)
    # The monitor's snapshot (what `status` shows) follows.
    states = poll_until(lambda: (s := snapshot_states()) and s[(node.name, 0)] == fleet.DEAD and s, timeout_s=10,
                        interval_s=0.2, what="the snapshot to show the host dead")
    assert sorted(states.values()) == [fleet.DEAD, fleet.HEALTHY, fleet.HEALTHY]


def test_preempted_slice_loses_its_hosts(env):
    cloud, controller = env["cloud"], env["controller"]
    node = env["nodes"][0]
    machines = {r["machine_id"] for r in vms.host_records(CLUSTER) if r["node"] == node.name}
    assert len(machines) == 2
    cloud.preempt(ZONE, node.name)  # on-demand: TERMINATED; the listener kills its VMs
    assert cloud.get_node(ZONE, node.name).state is NodeState.TERMINATED
    # The emulator hands the change to its VMs from its own thread, as the real cloud does.
    poll_until(lambda: not [r for r in vms.host_records(CLUSTER) if r["node"] == node.name], timeout_s=10,
               interval_s=0.1, what="the preempted node's VMs to go")
    assert wait_no_leftovers(machines, None, timeout_s=10) == []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if {h.node_name for h in controller.dead_hosts()} >= {node.name}:
            break
        time.sleep(0.1)
    assert node.name in {h.node_name for h in controller.dead_hosts()}


def test_replaced_slice_gets_new_agents(env):
    """After the v4-16 is deleted and created again under the same name, wait_for_hosts
    replaces its dead agents and placement group."""
    cloud, clock, controller = env["cloud"], env["clock"], env["controller"]
    old = env["nodes"][0]
    cloud.delete_node(ZONE, old.name)
    clock.advance(1.0)
    cloud.list_nodes(ZONE)  # the node is gone
    cloud.create_node(ZONE, old.name, NodeRequest("v4-16", "tpu-ubuntu2204-base", labels=dict(old.labels),
                                                   metadata=env["metadata"]))
    clock.advance(1.0)
    node = cloud.get_node(ZONE, old.name)
    assert node.state is NodeState.READY
    infos = controller.wait_for_hosts([node], timeout_s=90)
    assert [(h.worker_id, h.healthy) for h in infos] == [(0, True), (1, True)]
    assert not {h.ray_node_id for h in infos} & {h.ray_node_id for h in env["infos"]}
