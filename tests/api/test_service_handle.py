"""A service's durable record and how it is read without Ray: the store, each replica's state
from its run and the router's counters, the replicas' slices, and `runs` listing it."""

from __future__ import annotations

import json
import time

import pytest
from typer.testing import CliRunner

from podmanager.api.serve import replica_slices
from podmanager.api.service_handle import ServiceHandle, replica_states, service_summary
from podmanager.cli import app
from podmanager.core.errors import SpecError, TimeoutExceededError
from podmanager.core.run_results import AttemptResult, RunResult
from podmanager.core.spec import parse_spec
from podmanager.core.workload import Workload
from podmanager.serving.goodput import FullReplicaTime
from podmanager.state import StateStore
from podmanager.state.run_records import RunRecord, RunStore
from podmanager.state.run_state import Replacing
from podmanager.state.services import (
    ReplicaCounters,
    ServiceCounters,
    ServiceRecord,
    ServiceStore,
)

NOW = 1_000_000.0


def service(**changes: object) -> ServiceRecord:
    base = ServiceRecord(service_id="svc-1", cluster="demo", program="doubler.py", slices=[0, 1],
                         replica_runs=["r0", "r1"], endpoint="http://127.0.0.1:8123",
                         replica_url="ws://127.0.0.1:8124/replica", created_at=NOW)
    return base.model_copy(update=changes)


def run(run_id: str, slice_index: int, status: str = "running", attempt: int = 0) -> RunRecord:
    return RunRecord(run_id=run_id, cluster="demo", workload=Workload(entrypoint="doubler.py"), slices=[slice_index],
                     budgets={}, checkpoint_dir=None, status=status, attempt=attempt)


def replacing(record: RunRecord) -> RunRecord:
    record.phase = Replacing(attempt=record.attempt + 1, slices=record.slices, reason="preemption")
    return record


def counters(*replicas: ReplicaCounters, at: float = NOW) -> ServiceCounters:
    return ServiceCounters(requests=10, served=9, failed=0, rejected=1, p50_ms=3.0, p99_ms=9.0,
                           replicas=list(replicas), at=at)


def connected(replica: int, run_id: str, state: str = "ready") -> ReplicaCounters:
    return ReplicaCounters(replica=replica, run_id=run_id, attempt=0, state=state, outstanding=0, served=4)


def test_the_store_keeps_the_record_and_counters_never_overwrite_a_cancel(tmp_path) -> None:
    store = ServiceStore(tmp_path / "state.db")
    store.create(service())
    cancelled = store.get("svc-1")
    cancelled.status = "cancelled"
    store.save(cancelled)
    store.save_counters("svc-1", counters(connected(0, "r0")))  # the router, a moment later
    kept = store.get("svc-1")
    assert kept.status == "cancelled" and kept.finished
    assert kept.counters.requests == 10 and kept.counters.replicas[0].run_id == "r0"
    assert [s.service_id for s in store.list("demo")] == ["svc-1"] and store.serving("demo") == []
    store.save_counters("nope", counters())  # a service that is gone: nothing written, no error
    assert store.get("nope") is None


@pytest.mark.parametrize(("runs", "seen", "expected"), [
    ([run("r0", 0), run("r1", 1)], [connected(0, "r0"), connected(1, "r1", "draining")], ["ready", "draining"]),
    ([run("r0", 0), run("r1", 1)], [connected(0, "r0")], ["ready", "starting"]),  # not connected yet
    ([run("r0", 0), replacing(run("r1", 1, "recovering", 1))], [connected(0, "r0")], ["ready", "replacing"]),
    ([run("r0", 0), run("r1", 1, "recovering", 1)], [connected(0, "r0")], ["ready", "restarting"]),  # no slice
    ([run("r0", 0, "failed"), run("r1", 1, "cancelled")], [], ["failed", "cancelled"]),
    ([run("r0", 0), None], [], ["starting", "missing"]),
])
def test_a_replicas_state_comes_from_its_run_and_the_routers_counters(runs, seen, expected) -> None:
    states = replica_states(service(counters=counters(*seen)), runs, NOW + 1)
    assert [s.state for s in states] == expected
    assert [s.replica for s in states] == [0, 1]


def test_a_service_whose_every_replica_ended_reads_failed_and_says_how_to_stop_it() -> None:
    ended = service()
    replicas = replica_states(ended, [run("r0", 0, "failed"), run("r1", 1, "cancelled")], NOW)
    summary = service_summary(ended, replicas)
    assert summary["status"] == "failed"
    assert "replica 0 (run r0) failed; replica 1 (run r1) cancelled" in summary["message"]
    assert "podmanager cancel svc-1" in summary["message"]
    one_left = replica_states(ended, [run("r0", 0, "failed"), run("r1", 1)], NOW)
    assert service_summary(ended, one_left)["status"] == "serving"
    assert service_summary(ended.model_copy(update={"status": "cancelled"}), replicas)["status"] == "cancelled"


def test_a_replica_shows_the_checkpoint_step_it_serves() -> None:
    seen = connected(0, "r0").model_copy(update={"step": 400})
    assert [s.step for s in replica_states(service(counters=counters(seen)), [run("r0", 0), run("r1", 1)],
                                           NOW + 1)] == [400, None]


def test_stale_counters_say_no_replica_is_ready() -> None:
    stale = service(counters=counters(connected(0, "r0"), connected(1, "r1"), at=NOW - 60))
    assert [s.state for s in replica_states(stale, [run("r0", 0), run("r1", 1)], NOW)] == ["starting", "starting"]


def test_replicas_take_the_first_slices_and_a_count_beyond_them_is_refused() -> None:
    assert replica_slices([0, 1, 2], None) == [0, 1, 2]
    assert replica_slices([0, 1, 2], 2) == [0, 1]
    with pytest.raises(SpecError, match="--replicas 4: each replica is one slice and there are 3"):
        replica_slices([0, 1, 2], 4)
    with pytest.raises(SpecError, match="--replicas 0: a service needs at least one replica"):
        replica_slices([0, 1, 2], 0)


def test_runs_lists_a_service_with_its_replicas_and_counters(tmp_path) -> None:
    store = StateStore()
    store.save_cluster("demo", parse_spec({"name": "demo", "backend": "simulated", "slices": [{"accelerator": "v4-8"}]}), "up")
    runs = RunStore(store.path)
    for record in (run("r0", 0), run("r1", 1)):
        runs.create(record)
    ServiceStore(store.path).create(service(counters=counters(connected(0, "r0"), connected(1, "r1"), at=None)))
    listed = CliRunner().invoke(app, ["runs", "-c", "demo", "--json"])
    assert listed.exit_code == 0, listed.output
    [entry] = [e for e in json.loads(listed.output) if e["kind"] == "service"]
    assert entry["run_id"] == "svc-1" and entry["endpoint"] == "http://127.0.0.1:8123"
    assert (entry["requests"], entry["failures"], entry["rejected"], entry["p99_ms"]) == (10, 0, 1, 9.0)
    assert [r["state"] for r in entry["replicas"]] == ["starting", "starting"]  # counters of no time: stale
    table = CliRunner().invoke(app, ["runs", "-c", "demo"])
    assert "services of demo" in table.output and "svc-1" in table.output
    assert "0:starting" in table.output


def test_serving_goodput_counts_from_the_first_full_moment_the_time_every_replica_was_ready() -> None:
    time = FullReplicaTime(replicas=2)
    for now, ready in ((0.0, 0), (5.0, 1), (10.0, 2), (11.0, 2), (12.0, 1), (14.0, 1), (15.0, 2), (16.0, 2)):
        time.tick(ready, now)
    # From 10 s (first full) to 16 s: full during (10,11], (14,15] and (15,16]; not (11,12] ... (12,14].
    assert (time.full_s, time.since_full_s) == (3.0, 6.0)
    assert ServiceCounters(full_s=time.full_s, since_full_s=time.since_full_s).goodput == 0.5
    assert ServiceCounters().goodput is None


def test_a_restarted_routers_goodput_carries_on_and_counts_its_gap_as_not_full() -> None:
    time = FullReplicaTime(replicas=2)
    time.resume(full_s=3.0, since_full_s=6.0, gap_s=2.0, now=100.0)  # the last router wrote 2 s ago
    time.tick(2, 101.0)
    assert (time.full_s, time.since_full_s) == (4.0, 9.0)
    fresh = FullReplicaTime(replicas=2)
    fresh.resume(full_s=0.0, since_full_s=0.0, gap_s=2.0, now=100.0)  # never full yet: nothing to carry
    fresh.tick(1, 101.0)
    assert (fresh.full_s, fresh.since_full_s) == (0.0, 0.0)


def test_attach_follows_a_service_until_it_stops_serving(tmp_path) -> None:
    store = StateStore()
    store.save_cluster("demo", parse_spec({"name": "demo", "backend": "simulated", "zones": ["sim-zone-a"],
                                           "slices": [{"accelerator": "v4-8", "count": 2}]}), "up")
    runs = RunStore(store.path)
    for record in (run("r0", 0, "failed"), run("r1", 1, "cancelled")):
        runs.create(record)
    services = ServiceStore(store.path)
    services.create(service(counters=counters(at=None)))
    ended = CliRunner().invoke(app, ["attach", "svc-1", "-c", "demo"])
    assert ended.exit_code == 1, ended.output  # every replica ended: nothing serves
    assert "replicas 0:failed, 1:cancelled | requests 10, failures 0, 503s 1" in ended.output
    assert "service svc-1 is failed: every replica's run ended" in ended.output
    cancelled = services.get("svc-1")
    cancelled.status = "cancelled"
    services.save(cancelled)
    as_json = CliRunner().invoke(app, ["attach", "svc-1", "-c", "demo", "--json"])
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout)["status"] == "cancelled"


def test_a_replica_failing_in_warmup_says_why_with_its_run_id_and_logs_of_the_service_name_its_replicas() -> None:
    store = StateStore()
    store.save_cluster("demo", parse_spec({"name": "demo", "backend": "simulated", "slices": [{"accelerator": "v4-8"}]}), "up")
    runs = RunStore(store.path)
    failed = run("r0", 0, "failed")
    last = AttemptResult(attempt=0, status="failed", started=0.0, ended=1.0, hosts=[],
                         last_lines=["Traceback (most recent call last):", "ValueError: warmup: bad shape", ""])
    failed.result = RunResult(run_id="r0", cluster="demo", status="failed", attempts=1, attempt_log=[last], hosts=[],
                              message="run r0 failed: slice-0/0 exited with code 1")
    for record in (failed, run("r1", 1, "failed")):
        runs.create(record)
    ServiceStore(store.path).create(service())
    from podmanager.api.service_handle import summarize

    summary = summarize(ServiceStore(store.path).get("svc-1"), runs, NOW)
    assert summary["status"] == "failed"
    assert ("replica 0 (run r0) failed: run r0 failed: slice-0/0 exited with code 1 (its last line: ValueError: "
            "warmup: bad shape)") in summary["message"]
    assert "replica 1 (run r1) failed" in summary["message"] and "podmanager logs --run RUN_ID" in summary["message"]

    logs = CliRunner().invoke(app, ["logs", "-c", "demo", "--run", "svc-1", "-F"])
    assert logs.exit_code == 2, logs.output
    assert "svc-1 is a service" in logs.output and "replica 0: r0, replica 1: r1" in logs.output


def test_waiting_for_all_replicas_waits_for_one_whose_run_is_not_submitted_yet(tmp_path) -> None:
    """Another process may open the service while `serve` still submits its replicas: "all" is
    every slice of the service, not the replicas listed so far."""
    runs, services = RunStore(tmp_path / "state.db"), ServiceStore(tmp_path / "state.db")
    runs.create(run("r0", 0))
    services.create(service(replica_runs=["r0"], counters=counters(connected(0, "r0"), at=time.time())))
    handle = ServiceHandle("demo", "svc-1", services=services, runs=runs)
    with pytest.raises(TimeoutExceededError, match="2 replica"):
        handle.wait_ready(timeout_s=0.3)
    assert [r.state for r in handle.wait_ready(1, timeout_s=0.3)] == ["ready"]

    runs.create(run("r1", 1))
    services.add_replica_run("svc-1", "r1")
    services.save_counters("svc-1", counters(connected(0, "r0"), connected(1, "r1"), at=time.time()))
    assert [r.state for r in handle.wait_ready(timeout_s=5)] == ["ready", "ready"]
