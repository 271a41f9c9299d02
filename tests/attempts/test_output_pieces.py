"""A host's output, complete whatever its volume, without Ray: the host reads it in chunks of
whole lines, sends the tail at the exit, the gang collects it to the end (what a stopped
process prints included), and a follower skips lines (and says so) rather than fall behind."""

from __future__ import annotations

import sys
import textwrap

import pytest
from fake_hosts import Behaviour, FakeRemote, agents

from podmanager.api.run_handle import RunHandle
from podmanager.attempts import logs
from podmanager.attempts.attempt import AttemptRunner
from podmanager.attempts.gang import Gang
from podmanager.attempts.logs import read_new_lines
from podmanager.core.clock import poll_until
from podmanager.core.records import HostRef
from podmanager.core.run_results import RunResult
from podmanager.core.workload import Workload
from podmanager.state.run_records import RunRecord, RunStore
from podmanager.vm.host_wire import HostLaunch, PollReply, RunSetup
from podmanager.vm.process import read_chunk, read_tail
from podmanager.vm.workload_runs import HostRuns

RUN = RunSetup(run_id="run-1", workload=Workload(command=["train"], working_dir=None))


def read_all(path, max_bytes: int, *, final: bool) -> list[bytes]:
    chunks, offset = [], 0
    while True:
        chunk = read_chunk(path, offset, max_bytes, final=final)
        if not chunk.data:
            return chunks
        assert len(chunk.data) <= max_bytes and chunk.left == path.stat().st_size - chunk.offset
        chunks.append(chunk.data)
        offset = chunk.offset


# ---------------------------------------------------------------- the host's reads


def test_chunks_are_whole_lines_and_add_up_to_the_file(tmp_path):
    path = tmp_path / "out.log"
    path.write_bytes(b"".join(b"line %d\n" % i for i in range(1000)) + b"unterminated")
    chunks = read_all(path, 100, final=False)
    assert all(c.endswith(b"\n") for c in chunks)
    assert b"".join(chunks) == path.read_bytes()[:-len(b"unterminated")]  # still being written
    assert b"".join(read_all(path, 100, final=True)) == path.read_bytes()  # the writer has exited


def test_a_line_longer_than_a_chunk_comes_in_pieces(tmp_path):
    path = tmp_path / "out.log"
    path.write_bytes(b"short\n" + b"x" * 250 + b"\nend\n")
    chunks = read_all(path, 100, final=False)
    assert b"".join(chunks) == path.read_bytes()
    assert chunks[0] == b"short\n" and chunks[1] == b"x" * 100


def test_the_tail_is_the_last_lines_read_from_the_end_only(tmp_path):
    path = tmp_path / "out.log"
    path.write_bytes(b"".join(b"noise %d\n" % i for i in range(200_000))
                     + b"Traceback (most recent call last):\nValueError: boom\n")
    assert read_tail(path, lines=3) == ["noise 199999", "Traceback (most recent call last):", "ValueError: boom"]
    # Bounded by bytes too: a piece of a line at the cut is not shown as if it were a line.
    assert read_tail(path, lines=1000, max_bytes=53) == ["Traceback (most recent call last):", "ValueError: boom"]
    assert read_tail(path, lines=1000, max_bytes=40) == ["ValueError: boom"]
    assert read_tail(tmp_path / "missing.log") == []


def start(runs: HostRuns, code: str) -> int:
    workload = Workload(command=[sys.executable, "-c", textwrap.dedent(code)], working_dir=None)
    return runs.start(HostLaunch(run=RunSetup(run_id="r", workload=workload), attempt=0))


def poll_to_the_end(runs: HostRuns, max_bytes: int) -> tuple[bytes, list[PollReply]]:
    offset, data, replies = 0, b"", []
    while True:
        reply = runs.poll("r", offset, hold_s=0.0 if replies and replies[-1].left else 0.5, max_bytes=max_bytes)
        replies.append(reply)
        data, offset = data + reply.output, reply.offset
        if not reply.running and not reply.left:
            return data, replies


def test_a_program_that_writes_megabytes_then_raises_is_polled_to_its_last_byte(tmp_path):
    runs = HostRuns(tmp_path)
    start(runs, """
        import sys
        for i in range(60_000):
            print(f"line {i:06d} " + "x" * 40)
        raise ValueError("boom after 3 MB")
    """)
    data, replies = poll_to_the_end(runs, max_bytes=1 << 20)
    assert data == runs.processes["r"].log_path.read_bytes()
    lines = data.decode().splitlines()
    assert [line[:11] for line in lines[:60_000]] == [f"line {i:06d}" for i in range(60_000)]
    assert lines[-1] == "ValueError: boom after 3 MB"
    assert replies[-1].exit_code == 1 and replies[-1].tail[-1] == "ValueError: boom after 3 MB"
    assert any(r.left for r in replies)  # it took more than one reply: the host said there was more
    assert all(r.tail == () for r in replies if r.running)  # the tail travels with the exit only


def test_what_a_program_prints_while_being_stopped_is_in_the_next_poll(tmp_path):
    runs = HostRuns(tmp_path)
    start(runs, """
        import signal, sys, time
        def save(*_):
            print("saving checkpoint...", flush=True)
            time.sleep(0.2)
            print("saved", flush=True)
            sys.exit(0)
        signal.signal(signal.SIGTERM, save)
        print("ready", flush=True)
        time.sleep(600)
    """)
    poll_until(lambda: b"ready" in runs.poll("r", 0).output, timeout_s=30, interval_s=0.05)
    offset = runs.poll("r", 0).offset
    assert runs.stop("r", grace_s=30) == 0
    reply = runs.poll("r", offset)
    assert reply.output == b"saving checkpoint...\nsaved\n" and not reply.running and reply.left == 0
    assert reply.tail[-2:] == ("saving checkpoint...", "saved")


# ---------------------------------------------------------------- the gang and the attempt


@pytest.fixture
def remote():
    return FakeRemote()


def test_the_gang_collects_output_larger_than_a_reply_without_holding(remote):
    lines = [f"line {i}" for i in range(50)]
    hosts = agents(lambda s, attempt: Behaviour(polls=1, lines=["\n".join(lines)], reply_bytes=64), slices=1)
    gang = Gang(hosts, "run-1", remote=remote, hold_s=1.0)
    gang.start(RUN, 0, [{"PODMANAGER_ATTEMPT": "0"}])
    seen: list[bytes] = []
    gang.poll(lambda s, data: seen.append(data), wait_s=0)  # the process exits with all its output unsent
    assert gang.hosts[0].exit_code == 0 and not gang.hosts[0].collected
    gang.collect(lambda s, data: seen.append(data), wait_s=0)
    assert b"".join(seen).decode().splitlines() == lines and gang.hosts[0].collected
    assert len(seen) > 5 and hosts[0][1].holds[1:] == [0.0] * (len(hosts[0][1].holds) - 1)


def test_a_failing_hosts_tail_reaches_the_result_and_every_line_the_logs(remote):
    burst = [f"noise {i}" for i in range(2000)] + ["Traceback (most recent call last):", "ValueError: boom"]
    hosts = agents(lambda s, attempt: Behaviour(polls=2 if s.slice_index == 1 else 100,
                                                exit_code=1 if s.slice_index == 1 else 0,
                                                lines=["loading", "\n".join(burst)], reply_bytes=1024,
                                                on_stop=["stopping: saving checkpoint...", "saved"]))
    runner = AttemptRunner("c", Workload(command=["train"], working_dir=None), "run-1", simulated=True,
                           checkpoint_dir=None, poll_interval_s=0.0, failure_grace_s=0.5, remote=remote)
    result = runner.run_attempt(hosts, 0)
    assert result.failed_host == "slice-1/host-0"
    assert result.last_lines[-2:] == ["Traceback (most recent call last):", "ValueError: boom"]
    failed = runner.logs.path(hosts[1][0]).read_text().splitlines()
    assert failed == ["loading"] + burst  # every line, although each reply carried 1 KiB
    survivor = runner.logs.path(hosts[0][0]).read_text().splitlines()
    assert survivor[-2:] == ["stopping: saving checkpoint...", "saved"]  # printed after the SIGTERM


def test_output_a_lost_host_never_sent_is_noted_in_its_log(remote):
    hosts = agents(lambda s, attempt: Behaviour(polls=100, lines=["one", "two", "three"],
                                                lost_after=2 if s.slice_index == 0 else None))
    runner = AttemptRunner("c", Workload(command=["train"], working_dir=None), "run-1", simulated=True,
                           checkpoint_dir=None, poll_interval_s=0.0, failure_grace_s=0.5, remote=remote)
    result = runner.run_attempt(hosts, 0)
    assert result.failed_host == "slice-0/host-0"
    lost = runner.logs.path(hosts[0][0]).read_text()
    assert lost.startswith("one\ntwo\n")
    assert "[podmanager] output of slice-0/host-0 after byte 8 was not collected (RayActorError" in lost
    assert "not collected" not in runner.logs.path(hosts[1][0]).read_text()


# ---------------------------------------------------------------- following


def test_new_lines_within_a_budget_are_the_latest_and_the_rest_are_counted(tmp_path):
    path = tmp_path / "out.log"
    path.write_bytes(b"".join(b"line %04d\n" % i for i in range(1000)))  # 10 bytes a line
    new = read_new_lines(path, 0, final=False, budget=95)
    assert new.text.splitlines() == [f"line {i:04d}" for i in range(991, 1000)] and new.skipped == 991
    assert new.offset == path.stat().st_size
    path.write_bytes(path.read_bytes() + b"line 1000\nline 10")  # within the budget: all of it
    new = read_new_lines(path, new.offset, final=False, budget=95)
    assert (new.text, new.skipped) == ("line 1000\n", 0)
    assert read_new_lines(path, new.offset, final=True, budget=95).text == "line 10"


def test_reading_the_logs_gives_every_line(tmp_path):
    path = tmp_path / "slice-0-host-0.log"
    path.write_bytes(b"a\n\nb\r\nno newline")
    assert list(logs.lines(path)) == ["a", "", "b", "no newline"]


def test_a_follower_skips_what_it_cannot_show_and_says_where_it_all_is(tmp_path):
    runs = RunStore()
    run = runs.create(RunRecord(run_id="r1", cluster="c", workload=Workload(command=["true"]), slices=[0], budgets={}, checkpoint_dir=None,
                                status="running"))
    handle = RunHandle("c", "r1", runs=runs)
    handle.folder.append(HostRef(0, 1), b"")
    log = handle.folder.path(HostRef(0, 1))
    log.write_bytes(b"".join(b"step %05d\n" % i for i in range(20_000)) + b"Traceback\nValueError: boom\n")
    run.status = "failed"
    run.result = RunResult(run_id="r1", cluster="c", status="failed", message="failed", hosts=[], attempts=1)
    runs.save(run)
    shown: list[str] = []
    handle.follow(lambda host, text: shown.extend(f"[{host.label}] {line}" for line in text.splitlines()),
                  live_bytes=1000)
    notice = shown[0]
    skipped = int(notice.split("podmanager: ")[1].split()[0])
    assert notice.endswith(f"every line is in 'podmanager logs -c c --run r1 --host slice-0/host-1' ({log})")
    assert skipped + len(shown) - 1 == 20_002  # each line either shown or counted
    assert shown[-2:] == ["[slice-0/host-1] Traceback", "[slice-0/host-1] ValueError: boom"]
    assert [line.removeprefix("[slice-0/host-1] ") for line in shown[1:-2]] == \
        [f"step {i:05d}" for i in range(20_000 - (len(shown) - 3), 20_000)]



@pytest.mark.parametrize("watched", [False, True])
def test_output_followed_live_is_fetched_on_a_short_hold_only_while_followed(remote, watched):
    hosts = agents(lambda s, attempt: Behaviour(polls=6, lines=["one", "two"]), slices=1)
    runner = AttemptRunner("c", Workload(command=["train"], working_dir=None), "run-1", simulated=True,
                           checkpoint_dir=None, poll_interval_s=0.0, remote=remote)
    if watched:
        runner.logs.mark_watched()  # as the dashboard does while it shows the run's output
    runner.run_attempt(hosts, 0)
    held = [h for h in hosts[0][1].holds if h > 0]  # a running host's polls (an exited one's hold nothing)
    assert held and set(held) == ({0.2} if watched else {1.0})
