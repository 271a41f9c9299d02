"""The progress wire: the record a program writes (`runtime.contract.ProgressRecord`, one JSON
line), the host reading it back (`hosts.process`), and the one rule that combines the hosts'
records into the attempt's progress (`running.progress.combine`)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pytest

from podmanager import runtime
from podmanager.attempts.progress import AttemptProgress, combine
from podmanager.runtime.contract import ProgressRecord
from podmanager.vm.process import first_progress, read_progress


@pytest.fixture(autouse=True)
def _no_progress_file(monkeypatch):
    monkeypatch.delenv("PODMANAGER_PROGRESS_FILE", raising=False)
    for name in ("JAX_NUM_PROCESSES", "JAX_PROCESS_ID", "JAX_COORDINATOR_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    yield
    runtime._reset_for_tests()  # closes the progress files report_progress opened


# ------------------------------------------------------------ the record and its line


def test_a_record_survives_its_line():
    record = ProgressRecord(7, 1_700_000_000.5, process_id=3, loss=0.25, metrics={"accuracy": 0.5, "norm": math.inf})
    line = record.to_line()
    assert line.endswith("\n") and line.count("\n") == 1
    assert json.loads(line) == {"step": 7, "time": 1_700_000_000.5, "process_id": 3, "loss": 0.25,
                                "accuracy": 0.5, "norm": math.inf}
    assert ProgressRecord.from_line(line) == record
    assert ProgressRecord.from_line(line.encode()) == record


def test_a_line_without_a_process_or_a_loss_is_a_record_without_them():
    record = ProgressRecord.from_line('{"step": 3, "time": 5}')
    assert record == ProgressRecord(3, 5.0)
    assert record.to_line() == '{"step": 3, "time": 5.0}\n'


@pytest.mark.parametrize("line", ['', '{"step": 3, "ti', '[3, 5]', '{"time": 5}', '{"step": 3}',
                                  '{"step": "3", "time": 5}', '{"step": true, "time": 5}',
                                  '{"step": 3.5, "time": 5}', '{"step": 3, "time": "now"}'])
def test_a_line_that_holds_no_record_is_refused(line):
    with pytest.raises(ValueError):
        ProgressRecord.from_line(line)


def test_values_that_are_not_numbers_are_left_out():
    line = '{"step": 1, "time": 2, "loss": "high", "note": "x", "lr": 0.1, "done": false}'
    assert ProgressRecord.from_line(line) == ProgressRecord(1, 2.0, metrics={"lr": 0.1})


def test_a_declared_step_count_and_done_survive_their_line():
    record = ProgressRecord(14, 5.0, total_steps=10_000, done=True)
    assert json.loads(record.to_line()) == {"step": 14, "time": 5.0, "total_steps": 10_000, "done": True}
    assert ProgressRecord.from_line(record.to_line()) == record
    # Only JSON's true says done; a count that is not an integer declares none.
    assert ProgressRecord.from_line('{"step": 1, "time": 2, "done": 1, "total_steps": 9.5}') == ProgressRecord(1, 2.0)


def test_a_metric_may_not_be_named_like_a_key(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="reserved"):
        ProgressRecord(1, 2.0, metrics={"time": 3.0})
    monkeypatch.setenv("PODMANAGER_PROGRESS_FILE", str(tmp_path / "p.jsonl"))
    with pytest.raises(ValueError, match="reserved"):
        runtime.report_progress(1, process_id=4)


# ------------------------------------------------------------ the program writes, the host reads


def test_the_host_reads_back_what_report_progress_wrote(tmp_path, monkeypatch):
    path = tmp_path / "progress.jsonl"
    monkeypatch.setenv("PODMANAGER_PROGRESS_FILE", str(path))
    for step in (4, 5, 6):
        runtime.report_progress(step, loss=1 / step, accuracy=step / 10)
    first, last = first_progress(path), read_progress(path)
    assert first is not None and last is not None
    assert (first.step, first.process_id, first.loss, first.metrics) == (4, 0, 0.25, {"accuracy": 0.4})
    assert (last.step, last.loss) == (6, 1 / 6) and first.time <= last.time


def test_a_step_count_declared_once_rides_every_later_line_and_done_the_last(tmp_path, monkeypatch):
    path = tmp_path / "progress.jsonl"
    monkeypatch.setenv("PODMANAGER_PROGRESS_FILE", str(path))
    runtime.report_progress(1, loss=1.0)
    runtime.report_progress(2, total_steps=3)
    runtime.report_progress(3)
    assert read_progress(path).total_steps == 3 and not read_progress(path).done
    assert first_progress(path).total_steps is None  # declared after it
    runtime.report_progress(3, done=True)
    assert read_progress(path).done


def test_the_host_reads_the_last_whole_record_and_the_first(tmp_path):
    path = tmp_path / "progress.jsonl"
    assert read_progress(path) is None and first_progress(path) is None
    # More than the 8 KB read_progress looks at, and a last line still being written.
    lines = [ProgressRecord(s, 100.0 + s, loss=1.0).to_line() for s in range(1, 400)]
    path.write_text("".join(lines) + '{"step": 400, "ti')
    assert read_progress(path) == ProgressRecord(399, 499.0, loss=1.0)
    assert first_progress(path) == ProgressRecord(1, 101.0, loss=1.0)


# ------------------------------------------------------------ the hosts combined


@dataclass
class Heard:
    """One host's last word on its progress, as a gang's HostState or a PollReply holds it."""

    first_progress: ProgressRecord | None
    progress: ProgressRecord | None


def at(step: int, time: float | None = None) -> ProgressRecord:
    return ProgressRecord(step, 1000.0 + step if time is None else time)


def test_the_attempt_started_at_the_earliest_first_step_and_is_at_the_step_every_host_reached():
    progress = combine([Heard(at(5), at(12)), Heard(at(3), at(9)), Heard(at(4), at(10))])
    assert (progress.first, progress.latest) == (at(3), at(9))


def test_hosts_that_reported_nothing_are_left_out():
    progress = combine([Heard(None, None), Heard(at(2), at(6))])
    assert (progress.first, progress.latest) == (at(2), at(6))
    assert combine([Heard(None, None)]) == combine([]) == AttemptProgress(None, None)


def test_one_host_saying_done_or_declaring_the_step_count_speaks_for_the_attempt():
    done = ProgressRecord(8, 1008.0, done=True)
    counted = ProgressRecord(9, 1009.0, total_steps=100)
    progress = combine([Heard(at(1), done), Heard(at(1), counted), Heard(at(1), at(9))])
    assert progress.done and progress.total_steps == 100 and progress.latest == done
    assert not combine([Heard(at(1), at(9))]).done and combine([Heard(at(1), at(9))]).total_steps is None


def test_the_pace_is_from_the_first_step_to_the_latest():
    assert combine([Heard(at(10, time=100.0), at(30, time=110.0))]).steps_per_s == 2.0
    assert combine([Heard(at(10), at(10))]).steps_per_s is None  # one step: no pace yet
    assert AttemptProgress(None, at(3)).steps_per_s is None
