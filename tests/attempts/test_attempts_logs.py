"""attempts/logs.py: a run's folder on the controller (`RunFolder`): where it is, its hosts' log files named and
read back in one place, read as they grow by one offset rule (`Tail`); and a run is finished
when its record says so, whatever files its folder holds. No Ray: the store and the folder."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from podmanager.api import run_handle as runs_api
from podmanager.api.run_handle import RunHandle, run_log_lines
from podmanager.attempts.logs import (
    RESULT_FILE,
    RunFolder,
    Tail,
    log_name,
    parse_log_name,
    resolve_run,
)
from podmanager.core import paths
from podmanager.core.errors import SpecError
from podmanager.core.records import HostRef, HostSlot
from podmanager.core.run_results import ACTIVE, FINISHED, RunResult
from podmanager.core.workload import Workload
from podmanager.state.run_records import RunRecord, RunStore

PROGRAM = Workload(command=["true"])  # a record names what its run runs

HOST = HostRef(0, 0)


# ---------------------------------------------------------------- the folder and its files


def test_a_run_folder_is_under_its_clusters_dir_and_made_by_the_first_write():
    folder = RunFolder("c", "r1")
    assert folder.folder == paths.cluster_dir("c") / "runs" / "r1"
    assert not folder.folder.exists() and folder.logs() == [] and folder.size(HOST) == 0  # reading makes nothing
    folder.append(HOST, b"hello\n")
    assert folder.path(HOST).read_bytes() == b"hello\n" and folder.size(HOST) == 6


def test_a_log_file_name_reads_back_as_its_host():
    for host in (HostRef(0, 0), HostRef(3, 12), HostRef(10, 2)):
        assert parse_log_name(log_name(host)) == host
    slot = HostSlot(2, 1, "c-s2", "10.0.0.1", 4, "v4-8")
    assert log_name(slot) == log_name(HostRef(2, 1))
    for other in (RESULT_FILE, "slice-0-host-1.log.tmp", "slice-x-host-1.log", "notes-slice-0-host-1.log"):
        assert parse_log_name(other) is None


def test_the_logs_are_the_host_files_in_host_order():
    folder = RunFolder("c", "r1")
    for host in (HostRef(10, 0), HostRef(2, 1), HostRef(2, 0)):
        folder.append(host, b"x\n")
    folder.save_result(RunResult.without_attempts("r1", "c", "succeeded", "done"))
    assert [host for host, _ in folder.logs()] == [HostRef(2, 0), HostRef(2, 1), HostRef(10, 0)]
    assert folder.logs(HostRef(2, 1)) == [(HostRef(2, 1), folder.path(HostRef(2, 1)))]
    assert json.loads((folder.folder / RESULT_FILE).read_text())["status"] == "succeeded"


def test_a_host_without_output_is_an_error_unless_the_reader_waits_for_it():
    folder = RunFolder("c", "r1")
    folder.append(HOST, b"x\n")
    with pytest.raises(SpecError, match="no output from slice-0/host-1 in run r1"):
        folder.logs(HostRef(0, 1))
    assert folder.logs(HostRef(0, 1), waiting=True) == []


def test_a_run_known_only_by_its_record_resolves_to_its_folder_before_it_has_one():
    RunStore().create(RunRecord("fresh", "c", PROGRAM, [0], {}, None, status="starting"))
    RunFolder("c", "old").append(HOST, b"x\n")
    assert resolve_run("c", None).run_id == "fresh"
    assert resolve_run("c", "old").folder == RunFolder("c", "old").folder


# ---------------------------------------------------------------- tailing


def test_a_tail_gives_whole_lines_and_an_unterminated_one_only_at_the_end():
    folder = RunFolder("c", "r1")
    other = HostRef(0, 1)
    tail = Tail(folder)
    assert tail.read(final=False) == []  # no folder yet
    folder.append(HOST, b"a\nb")
    folder.append(other, b"one\n")
    first = tail.read(final=False)
    assert [(r.host, r.new.text, r.new.offset) for r in first] == [(HOST, "a\n", 2), (other, "one\n", 4)]
    folder.append(HOST, b"c\nd")
    assert [(r.host, r.new.text) for r in tail.read(final=False)] == [(HOST, "bc\n"), (other, "")]
    assert [(r.host, r.new.text) for r in tail.read(final=True)] == [(HOST, "d"), (other, "")]
    assert [r.new.text for r in tail.read(final=True)] == ["", ""]  # nothing given twice
    assert tail.offsets == {folder.path(HOST): 6, folder.path(other): 4}


def test_a_tail_of_one_host_waits_for_it_and_then_reads_only_it():
    folder = RunFolder("c", "r1")
    tail = Tail(folder, HostRef(0, 1))
    folder.append(HOST, b"not this one\n")
    assert tail.read(final=False) == []
    folder.append(HostRef(0, 1), b"this one\n")
    assert [(r.host, r.new.text) for r in tail.read(final=True)] == [(HostRef(0, 1), "this one\n")]


def test_a_run_is_finished_by_its_record_status_alone():
    for status in ACTIVE:
        assert not RunRecord("r", "c", PROGRAM, [0], {}, None, status=status).finished
    for status in FINISHED:
        assert RunRecord("r", "c", PROGRAM, [0], {}, None, status=status).finished


# ---------------------------------------------------------------- "finished" is the record's


def running_run_with_a_result_file(runs: RunStore) -> RunFolder:
    """A run whose `result.json` is written while its record still says it runs (the
    supervisor writes the file, then the record)."""
    runs.create(RunRecord("r1", "c", PROGRAM, [0], {}, None, status="running"))
    folder = RunFolder("c", "r1")
    folder.append(HOST, b"first\npart")
    folder.save_result(RunResult.without_attempts("r1", "c", "succeeded", "done", attempts=1))
    return folder


def finish(runs: RunStore, status: str = "succeeded") -> None:
    run = runs.get("r1")
    assert run is not None
    run.status = status
    run.result = RunResult.without_attempts("r1", "c", status, "done", attempts=1)
    runs.save(run)


def poll_hook(monkeypatch, between_polls):  # type: ignore[no-untyped-def]
    """Run `between_polls()` where a follower waits for more, instead of waiting."""
    polls: list[float] = []

    def sleep(seconds: float) -> None:
        polls.append(seconds)
        between_polls()

    monkeypatch.setattr(runs_api, "time", SimpleNamespace(sleep=sleep))
    return polls


def test_logs_follow_goes_on_while_the_record_is_active_whatever_the_folder_holds(monkeypatch):
    runs = RunStore()
    folder = running_run_with_a_result_file(runs)
    lines = run_log_lines("c", "r1", follow=True)
    assert next(lines) == ("slice-0/host-0", "first")

    def between_polls() -> None:
        assert len(polls) == 1, "still following after the record said the run ended"
        folder.append(HOST, b"ial\nlast")
        finish(runs)

    polls = poll_hook(monkeypatch, between_polls)
    assert list(lines) == [("slice-0/host-0", "partial"), ("slice-0/host-0", "last")]
    assert len(polls) == 1


def test_logs_follow_of_a_run_without_a_record_shows_what_there_is_and_ends(monkeypatch):
    RunFolder("c", "orphan").append(HOST, b"one\ntwo")
    polls = poll_hook(monkeypatch, lambda: None)
    assert list(run_log_lines("c", "orphan", follow=True)) == [("slice-0/host-0", "one"), ("slice-0/host-0", "two")]
    assert polls == []


def test_attach_goes_on_while_the_record_is_active_whatever_the_folder_holds(monkeypatch):
    runs = RunStore()
    folder = running_run_with_a_result_file(runs)
    shown: list[str] = []

    def between_polls() -> None:
        assert len(polls) == 1, "still following after the record said the run ended"
        assert shown == ["first\n"]  # the unterminated line waits for the rest or the end
        folder.append(HOST, b"ial\n")
        finish(runs, "failed")

    polls = poll_hook(monkeypatch, between_polls)
    result = RunHandle("c", "r1", runs=runs).follow(lambda host, text: shown.append(text))
    assert result.status == "failed" and shown == ["first\n", "partial\n"] and len(polls) == 1


def test_a_run_ended_without_a_result_is_finished_all_the_same():
    runs = RunStore()
    runs.create(RunRecord("r1", "c", PROGRAM, [0], {}, None, status="cancelled", attempt=2))  # a teardown marked it
    handle = RunHandle("c", "r1", runs=runs)
    result = handle.wait(timeout_s=0)
    assert (result.status, result.attempts, result.message) == ("cancelled", 2, "run r1 cancelled")
    assert handle.follow().status == "cancelled"
