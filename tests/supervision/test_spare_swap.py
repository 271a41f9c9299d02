"""Hot spares without Ray: which slices are spares (core/spares.py), the swap in the run store,
a run's slices, `up`'s plan, and the supervisor taking a ready spare instead of waiting for a
create (on test_supervisor's fake cluster)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_hosts import Behaviour, FakeRemote, agents
from test_supervisor import ZONE, FakeCluster

from podmanager.api.submission import run_slices
from podmanager.core import spares
from podmanager.core.errors import PodmanagerError, SpecError
from podmanager.core.spec import parse_spec
from podmanager.core.workload import Workload
from podmanager.runtime.replica_protocol import ENV_REPLICA, ENV_SERVICE_ID
from podmanager.serving.router import ReplicaLoss
from podmanager.state import run_secrets
from podmanager.state.run_records import RunStore
from podmanager.supervision.supervisor import RunSupervisor, new_run


def spec_of(*groups: dict) -> object:
    return parse_spec({"name": "c", "backend": "simulated", "slices": list(groups)})


def test_a_group_with_spares_has_count_plus_spares_slices_and_the_last_ones_start_as_spares() -> None:
    spec = spec_of({"accelerator": "v4-8", "count": 2, "spares": 1}, {"accelerator": "v4-16", "count": 1})
    assert [s.index for s in spec.slice_list()] == [0, 1, 2, 3]
    assert spares.assign(spec, recorded=[]) == [2]
    assert spares.working(spec, [2]) == [0, 1, 3]


def test_recorded_spares_are_kept_and_busy_slices_never_become_spares() -> None:
    spec = spec_of({"accelerator": "v4-8", "count": 2, "spares": 1})
    assert spares.assign(spec, recorded=[1]) == [1]  # after a swap: slice 1 is the spare now
    assert spares.assign(spec, recorded=[], busy=[2]) == [1]
    assert spares.assign(spec, recorded=[5]) == [2]  # a recorded index the spec no longer has is dropped
    fewer = spec_of({"accelerator": "v4-8", "count": 3, "spares": 0})
    assert spares.assign(fewer, recorded=[2]) == []


def test_spares_refuse_a_negative_or_non_integer_count_by_field() -> None:
    for bad in (-1, True, "1"):
        with pytest.raises(SpecError, match=r"slices\[0\]\.spares"):
            spec_of({"accelerator": "v4-8", "spares": bad})


def test_a_spare_is_picked_only_of_the_same_accelerator_and_only_when_ready() -> None:
    spec = spec_of({"accelerator": "v4-8", "count": 1, "spares": 1}, {"accelerator": "v4-16", "count": 1,
                                                                         "spares": 1})
    # slices: 0 v4-8, 1 v4-8 spare, 2 v4-16, 3 v4-16 spare
    assert spares.pick(spec, 0, [1, 3], ready=lambda i: True) == 1
    assert spares.pick(spec, 2, [1, 3], ready=lambda i: True) == 3
    assert spares.pick(spec, 0, [1, 3], ready=lambda i: i != 1) is None


def test_ups_plan_says_what_the_spares_cost_in_chips() -> None:
    spec = spec_of({"accelerator": "v4-8", "count": 2, "spares": 1})
    assert spares.describe_cost(spec) == ("1 spare slice (1 x v4-8) holds 4 of the cluster's 12 chips idle, "
                                          "ready to replace a lost slice at once")
    assert spares.describe_cost(spec_of({"accelerator": "v4-8", "count": 2})) is None


def test_a_run_gets_the_working_slices_and_naming_a_spare_is_refused() -> None:
    spec = spec_of({"accelerator": "v4-8", "count": 2, "spares": 1})
    workload = Workload(command=["train"], working_dir=None)
    assert run_slices(spec, workload, [2]) == [0, 1]
    assert run_slices(spec, workload, [1]) == [0, 2]  # after a swap
    with pytest.raises(SpecError, match=r"--slices: slice\(s\) \[2\] are hot spares"):
        run_slices(spec, Workload(command=["train"], working_dir=None, slices=[1, 2]), [2])


def test_the_run_store_swaps_a_spare_in_one_transaction_and_only_once() -> None:
    runs = RunStore()
    runs.set_spares("c", [2])
    cluster = FakeCluster.__new__(FakeCluster)
    cluster.name = "c"
    run = runs.create(new_run(cluster, Workload(command=["x"], working_dir=None), "r1", [0, 1], None, {}))
    other = runs.create(new_run(cluster, Workload(command=["x"], working_dir=None), "r2", [3], None, {}))
    assert runs.swap_spare(run, 1, 2)
    assert run.slices == [0, 2] and runs.get("r1").slices == [0, 2]
    assert runs.spares("c") == [1]
    assert not runs.swap_spare(other, 3, 2)  # taken already: nothing changes
    assert runs.get("r2").slices == [3] and runs.spares("c") == [1]
    with pytest.raises(SpecError, match="hot spares"):  # a claim never takes a spare
        runs.claim(new_run(cluster, Workload(command=["x"], working_dir=None), "r3", [1], None, {}))


class SpareCluster(FakeCluster):
    """test_supervisor's fake cluster with a third slice, a hot spare; `unready`: slices whose
    hosts have no healthy agent."""

    def __init__(self, tmp_path: Path, script, unready: set[int] = frozenset(), spare_count: int = 1, **kw):
        super().__init__(tmp_path, script, **kw)
        self.spec = parse_spec({**self.spec.model_dump(mode="json"),
                                "slices": [{"accelerator": "v4-8", "count": 2, "spares": spare_count}]})
        self.hosts = agents(script, slices=2 + spare_count)
        for index in range(2, 2 + spare_count):
            self._create(index)
        self.unready = unready
        self.told: list[tuple[str, ReplicaLoss]] = []  # what the services' routers were told

    def replica_lost(self, service_id: str, loss: ReplicaLoss) -> None:
        self.told.append((service_id, loss))

    def agents(self, slice_indexes):
        missing = set(slice_indexes) & self.unready
        if missing:
            raise PodmanagerError(f"slice(s) {sorted(missing)} have no healthy agent")
        return super().agents(slice_indexes)


def _preempted_run(tmp_path: Path, unready: set[int] = frozenset()) -> tuple[SpareCluster, RunStore, object]:
    cluster = SpareCluster(tmp_path, lambda s, attempt: Behaviour(polls=200 if attempt == 0 else 2,
                                                                  first_step=1 if attempt == 0 else 41), unready)
    runs = RunStore()
    runs.set_spares("c", [2])
    runs.create(new_run(cluster, Workload(command=["train"], working_dir=None), "run-1", [0, 1], "/ck", {}))
    cluster.cloud.preempt(ZONE, "c-s1")
    result = RunSupervisor(cluster, runs, "run-1", poll_interval_s=0.0, remote=FakeRemote()).supervise()
    return cluster, runs, result


def test_a_preempted_slice_is_swapped_for_the_ready_spare_without_waiting_for_a_create(tmp_path) -> None:
    cluster, runs, result = _preempted_run(tmp_path)
    assert result.status == "succeeded" and result.preemptions == 1
    assert cluster.deleted == [] and cluster.restored == 0  # no delete, no create waited for
    assert runs.get("run-1").slices == [0, 2] and runs.spares("c") == [1]
    [incident] = result.incidents
    assert incident.slices == [1] and incident.swaps == [[1, 2]] and "swap" in incident.phases
    swap = next(data for kind, data in cluster.events if kind == "spare_swapped")
    assert (swap["lost"], swap["spare"]) == (1, 2)
    started = {slot.slice_index: agent.started for slot, agent in cluster.hosts}
    assert [env["PODMANAGER_ATTEMPT"] for env in started[2]] == ["1"]  # the relaunch ran on the spare
    assert [env["PODMANAGER_ATTEMPT"] for env in started[1]] == ["0"]
    # The spare was set up for the run while attempt 0 ran; the relaunch found it so.
    spare = next(agent for slot, agent in cluster.hosts if slot.slice_index == 2)
    assert spare.setups == ["run-1", "run-1"]
    assert result.attempt_log[1].setup_already == ["slice-0/host-0", "slice-2/host-0"]
    assert "setup" not in incident.phases
    prepared = [data for kind, data in cluster.events if kind == "spare_prepared"]
    assert [d["host"] for d in prepared] == ["slice-2/host-0"]


def test_without_a_ready_spare_the_lost_slice_is_replaced_as_before(tmp_path) -> None:
    cluster, runs, result = _preempted_run(tmp_path, unready={2})
    assert result.status == "succeeded"
    assert cluster.deleted == [[1]] and cluster.restored == 1
    assert runs.get("run-1").slices == [0, 1] and runs.spares("c") == [2]
    assert result.incidents[0].swaps is None


def test_an_unhealthy_slice_is_replaced_not_swapped_so_no_broken_slice_becomes_a_spare(tmp_path) -> None:
    from podmanager.core.clock import FakeClock
    from podmanager.core.faults import parse

    box: list[SpareCluster] = []

    def script(s, attempt):
        if attempt == 0 and s.slice_index == 1:
            parse("degrade:1:UNHEALTHY_MAINTENANCE").apply(box[0].cloud, cluster="c")
        return Behaviour(polls=10_000 if attempt == 0 else 3)

    cluster = SpareCluster(tmp_path, script, clock=FakeClock())
    box.append(cluster)
    runs = RunStore()
    runs.set_spares("c", [2])
    runs.create(new_run(cluster, Workload(command=["train"], working_dir=None), "run-1", [0, 1], "/ck", {}))
    result = RunSupervisor(cluster, runs, "run-1", poll_interval_s=1.0, remote=FakeRemote()).supervise()
    assert result.status == "succeeded" and result.incidents[0].cause == "infrastructure"
    assert cluster.deleted == [[1]] and runs.spares("c") == [2] and runs.get("run-1").slices == [0, 1]
    assert "spare_swapped" not in cluster.kinds()


@pytest.mark.parametrize("exit_code", [None, 3])
def test_a_replica_run_swaps_past_a_spare_another_replica_just_took_and_tells_its_router_how_it_ended(
        tmp_path, exit_code) -> None:
    """Two replicas of one service, each a run on one slice, and two spares (2, 3): replica 0's
    slice is preempted while replica 1's run takes spare 2 first; replica 0 gets spare 3. Its
    router hears the attempt was preempted (so what its predict ran on is retried); a program
    that failed is not a preemption."""
    cluster = SpareCluster(tmp_path, lambda s, attempt: Behaviour(
        polls=3 if exit_code else 200, exit_code=exit_code or 0) if attempt == 0 else Behaviour(polls=2),
        spare_count=2)
    runs = RunStore()
    runs.set_spares("c", [2, 3])
    for replica in (0, 1):
        env = {ENV_SERVICE_ID: "svc", ENV_REPLICA: str(replica)}
        run_secrets.save("c", f"replica-{replica}", env)  # as submit keeps a run's environment
        runs.create(new_run(cluster, Workload(command=["serve"], working_dir=None, env=env), f"replica-{replica}",
                            [replica], None, {}))
    swap = runs.swap_spare

    def other_replica_first(run, lost, spare):  # replica 1 lost its slice at the same moment and won spare 2
        if run.run_id == "replica-0" and spare == 2:
            assert swap(runs.get("replica-1"), 1, 2)
        return swap(run, lost, spare)

    runs.swap_spare = other_replica_first
    if exit_code is None:
        cluster.cloud.preempt(ZONE, "c-s0")
    result = RunSupervisor(cluster, runs, "replica-0", poll_interval_s=0.0, remote=FakeRemote()).supervise()

    assert result.status == "succeeded"
    assert cluster.told == [("svc", ReplicaLoss(run_id="replica-0", attempt=0, preempted=exit_code is None))]
    if exit_code is None:
        assert runs.get("replica-0").slices == [3] and runs.get("replica-1").slices == [2]
        assert runs.spares("c") == [0, 1] and result.incidents[0].swaps == [[0, 3]]
        assert cluster.deleted == [] and cluster.restored == 0
    else:
        assert runs.get("replica-0").slices == [0] and result.incidents[0].swaps is None


def test_a_spare_that_becomes_ready_later_is_set_up_for_the_run_once_and_never_before(tmp_path) -> None:
    from podmanager.core.clock import FakeClock

    clock = FakeClock()
    ready_at = clock.now() + 12.0  # the cluster's monitor makes the spare meanwhile

    class LateSpare(SpareCluster):
        def agents(self, slice_indexes):
            if 2 in slice_indexes and clock.now() < ready_at:
                raise PodmanagerError("slice(s) [2] have no healthy agent")
            return super().agents(slice_indexes)

    cluster = LateSpare(tmp_path, lambda s, attempt: Behaviour(polls=30), clock=clock)
    runs = RunStore()
    runs.set_spares("c", [2])
    runs.create(new_run(cluster, Workload(command=["train"], working_dir=None), "run-1", [0, 1], "/ck", {}))
    spare = next(agent for slot, agent in cluster.hosts if slot.slice_index == 2)
    asked_at: list[float] = []
    ask = spare.setup_workload.call
    spare.setup_workload.call = lambda *args: (asked_at.append(clock.now()), ask(*args))[1]

    result = RunSupervisor(cluster, runs, "run-1", poll_interval_s=1.0, remote=FakeRemote()).supervise()

    assert result.status == "succeeded" and result.attempts == 1
    assert asked_at and min(asked_at) >= ready_at and len(asked_at) >= 2  # asked again: found set up
    assert [d["host"] for kind, d in cluster.events if kind == "spare_prepared"] == ["slice-2/host-0"]  # said once
    assert spare.started == []  # a spare is never worked on


# ---------------------------------------------------------------- the keeper (control plane only)

def _kept_cluster() -> tuple:
    from podmanager.cluster.cluster_runtime import ClusterRuntime
    from podmanager.emulator.sim.cloud import SimCloud
    from podmanager.state import StateStore

    spec = parse_spec({"name": "k", "backend": "simulated", "zones": [ZONE], "simulation": {"boot_hosts": False},
                       "slices": [{"accelerator": "v4-8", "count": 1, "spares": 1}]})
    sim = SimCloud(create_latency_s=0.2, delete_latency_s=0.1)
    runtime = ClusterRuntime(spec, store=StateStore(), simulator=sim)
    runtime.bring_up(runtime.plan_changes(), 30.0)
    RunStore().set_spares("k", [1])
    return runtime, sim


def _node(sim, name: str):
    return next((n for n in sim.list_nodes(ZONE) if n.name == name), None)


def _keep_until(keeper, condition, timeout_s: float = 20.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the keeper did not get there in time"
        keeper()
        time.sleep(0.05)


def test_the_keeper_replaces_a_preempted_spare_and_leaves_working_slices_alone() -> None:
    from podmanager.cloud.base import NodeState
    from podmanager.cluster.spare_keeper import SpareKeeper

    runtime, sim = _kept_cluster()
    first = _node(sim, "k-s1").create_time
    sim.preempt(ZONE, "k-s1")
    keeper = SpareKeeper("k", lambda name: runtime)
    _keep_until(keeper, lambda: (n := _node(sim, "k-s1")) is not None and n.state is NodeState.READY
                and n.create_time != first)
    assert _node(sim, "k-s0").state is NodeState.READY
    kinds = [e.kind for e in runtime.store.events("k")]
    assert "spare_upkeep" in kinds and "slice_deleting" in kinds and "slice_creating" in kinds

    sim.preempt(ZONE, "k-s0")  # a working slice: the run's recovery replaces it, never the keeper
    for _ in range(3):
        keeper._next = 0.0
        keeper()
    assert _node(sim, "k-s0").state in (NodeState.PREEMPTED, NodeState.TERMINATED)  # not deleted, not made again


def test_the_keeper_creates_nothing_while_another_holds_the_clusters_lock_or_the_cluster_is_not_up() -> None:
    import threading

    from podmanager.cluster.spare_keeper import SpareKeeper
    from podmanager.state.lock import cluster_lock

    runtime, sim = _kept_cluster()
    sim.delete_node(ZONE, "k-s1")
    _keep_until(lambda: None, lambda: _node(sim, "k-s1") is None)
    keeper = SpareKeeper("k", lambda name: runtime)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with cluster_lock("k", "down", timeout_s=5.0):
            held.set()
            release.wait(10.0)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(5.0)
        keeper()
        assert _node(sim, "k-s1") is None
    finally:
        release.set()
        holder.join()
    runtime.store.set_cluster_status("k", "deleting")
    keeper._next = 0.0
    keeper()
    assert _node(sim, "k-s1") is None
    runtime.store.set_cluster_status("k", "up")
    _keep_until(keeper, lambda: _node(sim, "k-s1") is not None)


def test_up_says_what_the_spares_cost_and_status_shows_which_slices_are_spares(tmp_path) -> None:
    import json

    from typer.testing import CliRunner

    from podmanager.cli import app

    path = tmp_path / "spec.yaml"
    path.write_text("name: pool\nzones: [zone-a]\nslices:\n  - {accelerator: v4-8, count: 2, spares: 1}\n"
                    "simulation: {create_latency_s: 0.01, delete_latency_s: 0.01, boot_hosts: false}\n")
    runner = CliRunner()
    try:
        result = runner.invoke(app, ["up", "-f", str(path), "--dry-run", "--json"], prog_name="podmanager")
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
        assert report["plan"]["spares"].startswith("1 spare slice (1 x v4-8) holds 4 of the cluster's 12 chips idle")
        assert "holds 4 of the cluster's 12 chips idle" in result.stderr  # the up_plan event says it too
        assert [(s["index"], s["spare"]) for s in report["status"]["slices"]] == [(0, False), (1, False), (2, True)]
        table = runner.invoke(app, ["status", "-c", "pool"], prog_name="podmanager")
        assert table.exit_code == 0, table.output
        rows = [line for line in table.output.splitlines() if "pool-s" in line]
        assert [("spare" in row, "work" in row) for row in rows] == [(False, True), (False, True), (True, False)]
    finally:
        runner.invoke(app, ["down", "-c", "pool"], prog_name="podmanager")


def test_an_elastic_run_takes_the_spare_for_one_lost_slice_and_goes_on_without_the_other(tmp_path) -> None:
    """Both together (`spares: 1` and `--min-slices 1`): two working slices lost at once, one
    spare ready. The spare takes one's place, the run goes on at once on it alone (the slices
    left), the other lost slice is made again in the background, and the run grows back."""
    import threading

    gate = threading.Event()

    class SlowRestore(SpareCluster):
        def restore_slices(self, phases):
            assert gate.wait(30.0), "the replacement was never let through"
            super().restore_slices(phases)

    shrunk_before_restore: list[int] = []

    def script(s, attempt):
        if attempt == 1:  # on the spare alone, before the lost slice is back: then the cloud may finish it
            shrunk_before_restore.append(cluster.restored)
            gate.set()
            return Behaviour(polls=100_000, first_step=21)  # goes on until it is told to grow
        return Behaviour(polls=3 if attempt == 2 else 100_000, first_step=1 if attempt == 0 else 40)

    cluster = SlowRestore(tmp_path, script)
    runs = RunStore()
    runs.set_spares("c", [2])
    runs.create(new_run(cluster, Workload(command=["train"], working_dir=None, min_slices=1), "run-1", [0, 1], "/ck",
                        {}))
    cluster.cloud.preempt(ZONE, "c-s0")
    cluster.cloud.preempt(ZONE, "c-s1")
    result = RunSupervisor(cluster, runs, "run-1", poll_interval_s=0.0, remote=FakeRemote()).supervise()

    assert result.status == "succeeded" and result.preemptions == 1, result.message
    [incident] = result.incidents
    assert sorted(incident.slices) == [0, 1] and incident.swaps == [[0, 2]]
    assert shrunk_before_restore == [0]  # it went on before the lost slice was made again
    started = {slot.slice_index: [env["PODMANAGER_ATTEMPT"] for env in agent.started] for slot, agent in cluster.hosts}
    assert started[2] == ["1", "2"] and started[1] == ["0", "2"]  # the spare alone, then both again
    assert [a.degraded for a in result.attempt_log] == [False, True, False]
    kinds = cluster.kinds()
    assert kinds.index("spare_swapped") < kinds.index("run_shrunk") < kinds.index("run_grew")
    assert runs.get("run-1").slices == [1, 2] and runs.spares("c") == [0]
