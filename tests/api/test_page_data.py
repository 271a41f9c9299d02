"""What the page asks of a cluster's records (api/page_data.py): pages of runs and events that
match their filters, and a host's output read on from an offset, each reply bounded."""

from __future__ import annotations

import pytest
from dashboard_records import CLUSTER, preempted_run

from podmanager.api.page_data import LOG_BUDGET, MAX_POINTS, PageData
from podmanager.attempts.logs import RunFolder
from podmanager.core.errors import SpecError
from podmanager.core.events import EventKind
from podmanager.core.records import HostRef
from podmanager.core.workload import Workload
from podmanager.state import StateStore
from podmanager.state.run_records import RunRecord, RunStore
from podmanager.state.services import ServiceStore


def page(store: StateStore) -> PageData:
    return PageData(CLUSTER, store=store, runs=RunStore(store.path), services=ServiceStore(store.path),
                    status=lambda: None)


def test_runs_are_paged_newest_first_and_filtered():
    store = StateStore()
    preempted_run("r-old", t0=1000.0, store=store)
    for i in range(7):
        RunStore().create(RunRecord(f"job-{i}", CLUSTER, Workload(command=["python", f"eval_{i}.py"]), [i], {}, None,
                                    status="running" if i % 2 else "failed", created_at=2000.0 + i))
    data = page(store)
    first = data.run_list(offset=0, limit=3)
    assert first["total"] == 8 and [r["run_id"] for r in first["runs"]] == ["job-6", "job-5", "job-4"]
    assert [r["run_id"] for r in data.run_list(offset=6, limit=3)["runs"]] == ["job-0", "r-old"]
    running = data.run_list(status="running")
    assert running["total"] == 3 and {r["status"] for r in running["runs"]} == {"running"}
    assert [r["run_id"] for r in data.run_list(text="eval_3")["runs"]] == ["job-3"]
    assert data.run_list(text="%")["total"] == 0  # a LIKE wildcard is a plain character
    old = data.run_list(text="r-old")["runs"][0]
    assert (old["attempt"], old["step"], old["goodput"]) == (2, 20, 0.45)


def test_events_are_filtered_by_kind_slice_and_run_and_paged_back():
    store = StateStore()
    preempted_run(store=store)
    for i in range(5):
        store.add_event(CLUSTER, EventKind.SLICE_READY, f"slice {i} ready", slice_index=i)
    data = page(store)
    assert [e["kind"] for e in data.events(kind="spare_swapped")["events"]] == ["spare_swapped"]
    assert [e["message"] for e in data.events(slice_index=3)["events"]] == ["slice 3 ready"]
    assert [e["run_id"] for e in data.events(run_id="r1")["events"]] == ["r1"]
    newest = data.events(limit=3)
    assert newest["more"] and newest["total"] == 7 and len(newest["events"]) == 3
    older = data.events(before=newest["events"][-1]["id"], limit=10)
    assert not older["more"] and len(older["events"]) == 4
    with pytest.raises(SpecError, match="kind: 'nope' is no event kind"):
        data.events(kind="nope")


def test_a_hosts_output_is_read_on_from_its_offset_within_the_budget():
    store = StateStore()
    run = preempted_run(store=store)
    run.status = "running"
    RunStore().save(run)
    folder = RunFolder(CLUSTER, "r1")
    folder.append(HostRef(2, 0), b"one\ntwo\npart")
    data = page(store)
    first = data.logs("r1", "2/0", 0)
    assert first["text"] == "one\ntwo\n"  # the unfinished line waits for its end
    assert folder.watched(within_s=5.0)  # shown live: its hosts' output is fetched sooner
    folder.append(HostRef(2, 0), b"ial\n")
    assert data.logs("r1", "slice-2/0", first["offset"])["text"] == "partial\n"
    folder.append(HostRef(2, 0), b"x" * 100 + b"\n" + (b"y" * 1000 + b"\n") * (LOG_BUDGET // 1000 + 10))
    big = data.logs("r1", "2/0", first["offset"] + 8)
    assert len(big["text"]) <= LOG_BUDGET and big["skipped"] > 0
    assert data.run("r1")["hosts"] == ["slice-2/host-0"]
    assert data.logs("r1", "5/0", 0)["text"] == ""  # no output from that host (yet)


def test_a_runs_metric_series_is_thinned_to_a_bounded_reply_and_read_on_from_its_offset():
    store = StateStore()
    preempted_run(store=store)
    folder = RunFolder(CLUSTER, "r1")
    for step in range(1, 5001):
        folder.append_progress(0 if step < 3000 else 1, step, 1000.0 + step, 1.0 / step, {"accuracy": step / 5000})
    data = page(store)
    first = data.metric_points("r1", 0)
    assert len(first["points"]) == MAX_POINTS and first["points"][-1]["step"] == 5000
    assert first["points"][0] == {"attempt": 0, "step": 1, "time": 1001.0, "loss": 1.0, "accuracy": 0.0002}
    folder.append_progress(1, 5001, 6001.0, None, {})
    assert data.metric_points("r1", first["offset"])["points"] == [{"attempt": 1, "step": 5001, "time": 6001.0}]
