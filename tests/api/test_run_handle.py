"""Following a run shows only that run: two runs of one cluster (on disjoint slices) share its
event log, and every event a run causes carries its run id. No Ray: the store, two run
records and `Cluster` objects as the supervisors build them."""

from __future__ import annotations

from types import SimpleNamespace

from podmanager.api import run_handle as runs_api
from podmanager.api.cluster import Cluster
from podmanager.api.run_handle import RunHandle
from podmanager.cluster.cluster_runtime import ClusterRuntime
from podmanager.core.events import EventKind
from podmanager.core.records import HostRef
from podmanager.core.run_results import RunResult
from podmanager.core.spec import parse_spec
from podmanager.core.workload import Workload
from podmanager.state import Event, StateStore
from podmanager.state.run_records import RunRecord, RunStore

PROGRAM = Workload(command=["true"])  # a record names what its run runs

SPEC = {"name": "c", "backend": "simulated", "zones": ["sim-zone-a"], "slices": [{"accelerator": "v4-8", "count": 2}]}


def start(runs: RunStore, run_id: str, slice_index: int) -> RunRecord:
    return runs.create(RunRecord(run_id=run_id, cluster="c", workload=PROGRAM, slices=[slice_index], budgets={},
                                 checkpoint_dir=None, status="running"))


def finish(runs: RunStore, run_id: str) -> None:
    run = runs.get(run_id)
    assert run is not None
    run.status = "succeeded"
    run.result = RunResult(run_id=run_id, cluster="c", status="succeeded", message="done", hosts=[], attempts=1)
    runs.save(run)


def supervisor_cluster(store: StateStore, run_id: str) -> ClusterRuntime:
    """The cluster runtime a run's supervisor records through (as supervision/supervisor_actor.py builds it)."""
    return ClusterRuntime.from_name("c", store=store, run_id=run_id)


def test_following_a_run_shows_all_of_its_events_and_none_of_another_runs(monkeypatch):
    store, runs = StateStore(), RunStore()
    store.save_cluster("c", parse_spec(SPEC), "ready")
    client = Cluster.from_name("c", store=store)  # a client's: no run of its own
    client.runtime.record(EventKind.UP, "cluster-wide, before any run")
    start(runs, "run-a", 0)
    start(runs, "run-b", 1)
    a, b = supervisor_cluster(store, "run-a"), supervisor_cluster(store, "run-b")
    client.runtime.record(EventKind.RUN_SUBMITTED, "A submitted", run_id="run-a")
    client.runtime.record(EventKind.RUN_SUBMITTED, "B submitted", run_id="run-b")
    b.record(EventKind.ATTEMPT_STARTED, "B attempt 1")
    a.record(EventKind.ATTEMPT_STARTED, "A attempt 1")

    def between_polls(seconds: float) -> None:
        """Where the follower waits for more: both runs go on meanwhile, then A ends."""
        polls.append(seconds)
        assert len(polls) == 1, "still following run-a after it ended"
        b.record(EventKind.SLICE_DELETING, "B's slice replaced", 1)  # provisioning, through B's cluster object
        a.record(EventKind.RETRY, "A's create retried", call="create_node")  # its caller gives no run id
        client.runtime.record(EventKind.FAULT_INJECTED, "cluster-wide, during the runs")
        a.record(EventKind.SLICE_READY, "A's slice back", 0)
        finish(runs, "run-a")

    polls: list[float] = []
    monkeypatch.setattr(runs_api, "time", SimpleNamespace(sleep=between_polls))
    seen: list[Event] = []
    result = RunHandle("c", "run-a", runs=runs, store=store).follow(on_event=seen.append)

    assert result.status == "succeeded"
    assert [(e.kind, e.message) for e in seen] == [
        ("run_submitted", "A submitted"), ("attempt_started", "A attempt 1"),
        ("retry", "A's create retried"), ("slice_ready", "A's slice back")]
    assert {e.run_id for e in seen} == {"run-a"}
    # B's events are in the log all the same, each with B's run id.
    assert [e.kind for e in store.events("c", run_id="run-b")] == ["run_submitted", "attempt_started",
                                                                    "slice_deleting"]


def test_a_run_id_given_by_the_caller_wins_over_the_clusters():
    store = StateStore()
    store.save_cluster("c", parse_spec(SPEC), "ready")
    event = supervisor_cluster(store, "run-a").record(EventKind.RUN_SUBMITTED, "another run", run_id="run-b")
    assert event.run_id == "run-b"
    assert [e.id for e in store.events("c", run_id="run-b")] == [event.id]
    assert store.events("c", run_id="run-a") == []


def test_run_follows_from_its_own_submit_event_not_the_clusters_latest(monkeypatch):
    """Another client submits right after this one: `Cluster.run` must still show what its
    own run recorded in between, and not show its own submit event twice."""
    store, runs = StateStore(), RunStore()
    store.save_cluster("c", parse_spec(SPEC), "ready")
    seen: list[Event] = []
    cluster = Cluster.from_name("c", store=store, on_event=seen.append)
    other_client = Cluster.from_name("c", store=store)

    def submit(workload, *, budgets=None):  # type: ignore[no-untyped-def]
        start(runs, "run-a", 0)
        cluster.runtime.record(EventKind.RUN_SUBMITTED, "A submitted", run_id="run-a")
        supervisor_cluster(store, "run-a").record(EventKind.RUN_STARTED, "A started")  # its supervisor is quick
        start(runs, "run-b", 1)
        other_client.runtime.record(EventKind.RUN_SUBMITTED, "B submitted", run_id="run-b")
        supervisor_cluster(store, "run-a").record(EventKind.RUN_SUCCEEDED, "A done")
        finish(runs, "run-a")
        return cluster.run_handle("run-a")

    monkeypatch.setattr(cluster, "submit", submit)
    result = cluster.run(workload=None)  # type: ignore[arg-type]

    assert result.run_id == "run-a"
    assert [e.message for e in seen] == ["A submitted", "A started", "A done"]


def test_a_followed_run_shows_an_event_before_the_output_written_after_it(tmp_path):
    runs, store = RunStore(), StateStore()
    runs.create(RunRecord("r", "c", PROGRAM, [0], {}, None, status="succeeded", result=None))
    store.add_event("c", EventKind.RUN_SUBMITTED, "run r submitted", run_id="r")
    store.add_event("c", EventKind.ATTEMPT_STARTED, "attempt 0 on 1 host(s)", run_id="r")
    handle = RunHandle("c", "r", runs=runs, store=store)
    handle.folder.append(HostRef(0, 0), b"hello from the program\n")
    record = runs.get("r")
    record.result = RunResult.without_attempts("r", "c", "succeeded", "", attempts=1)
    runs.save(record)
    seen: list[str] = []
    handle.follow(lambda slot, text: seen.append(text.strip()), lambda event: seen.append(event.kind))
    assert seen.index("attempt_started") < seen.index("hello from the program")
