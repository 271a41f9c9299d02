"""The suite's own harness: what every test may rely on, however the runner was started."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from cluster_pool import FRESH, SPENDS, ClusterPool, order_by_spec, register

REPO = Path(__file__).resolve().parents[1]
PRINT_SIGINT = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"


def test_a_process_a_test_starts_answers_ctrl_c():
    """A child started by a test gets SIGINT's default action (Python turns it into
    KeyboardInterrupt), as from a terminal, so a test's Ctrl-C reaches it."""
    child = subprocess.run([sys.executable, "-c", PRINT_SIGINT], capture_output=True, text=True, check=True)
    assert child.stdout.strip() == "True"


def test_so_does_one_of_a_runner_started_as_a_background_job():
    """The runner started with SIGINT ignored, as `… &` in a script starts it (and execs keep):
    the test above still passes in it."""
    background = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                  "os.execv(sys.executable, [sys.executable, '-m', 'pytest', '-q', '-n', '0', '-p', 'no:cacheprovider', "
                  "'tests/test_harness.py::test_a_process_a_test_starts_answers_ctrl_c'])")
    runner = subprocess.run([sys.executable, "-c", background], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert runner.returncode == 0, runner.stdout[-3000:] + runner.stderr[-3000:]


class Module:
    """A test module that runs on the shared cluster of `spec` (as `module_cluster` registers it)."""

    def __init__(self, spec: dict) -> None:
        self.cluster = object()  # its `cluster` fixture
        register(self.cluster, spec)


class Item:
    def __init__(self, name: str, module: object, fresh: bool = False, spends: bool = False) -> None:
        self.name, self.module = name, module
        self.marks = {mark for mark, marked in ((FRESH, fresh), (SPENDS, spends)) if marked}

    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self.marks else None

    def __repr__(self) -> str:
        return self.name


def run_session(items: list, pool: ClusterPool, specs: dict) -> None:
    """What a session does with the pool: each test gets its module's cluster, and after it the
    pool keeps only what the next test uses."""
    for index, item in enumerate(items):
        if item.module in specs:
            pool.get(specs[item.module])
        pool.keep_for(item, items[index + 1] if index + 1 < len(items) else None)


def recording_pool(events: list, broken: str = "") -> ClusterPool:
    def take_down(name: str) -> None:
        events.append(("down", name))
        if name == broken:
            raise AssertionError(f"processes of {name} left after down")
    return ClusterPool(lambda spec: events.append(("up", spec["name"])) or spec["name"], take_down)


A, B = {"name": "a", "slices": [{"accelerator": "v4-8"}]}, {"name": "b", "slices": [{"accelerator": "v4-16"}]}


def test_the_modules_of_one_spec_run_together_on_one_cluster_downed_when_the_next_test_needs_another():
    first_a, only_b, second_a, plain = Module(A), Module(B), Module(dict(A)), object()
    items = [Item("a1", first_a), Item("a2", first_a), Item("b", only_b), Item("plain", plain), Item("a3", second_a)]
    order_by_spec(items)
    assert [i.name for i in items] == ["a1", "a2", "a3", "b", "plain"]
    events: list = []
    run_session(items, recording_pool(events), {first_a: A, second_a: A, only_b: B})
    assert events == [("up", "a"), ("down", "a"), ("up", "b"), ("down", "b")]


def test_a_fresh_cluster_test_runs_last_of_its_spec_on_a_cluster_no_other_test_has():
    module = Module(A)
    items = [Item("a1", module), Item("fresh", module, fresh=True), Item("a2", module)]
    order_by_spec(items)
    assert [i.name for i in items] == ["a1", "a2", "fresh"]
    events: list = []
    run_session(items, recording_pool(events), {module: A})
    assert events == [("up", "a"), ("down", "a"), ("up", "a"), ("down", "a")]


def test_a_test_that_spends_its_cluster_runs_last_of_its_spec_on_the_shared_one_and_none_has_it_after():
    first, second = Module(A), Module(A)
    items = [Item("a1", first), Item("spends", first, spends=True), Item("a2", second)]
    order_by_spec(items)
    assert [i.name for i in items] == ["a1", "a2", "spends"]
    later = Module(A)  # a test of the spec run afterwards all the same (a module collected alone later)
    events: list = []
    run_session(items + [Item("a3", later)], recording_pool(events), {first: A, second: A, later: A})
    assert events == [("up", "a"), ("down", "a"), ("up", "a"), ("down", "a")]


def test_the_session_end_downs_every_cluster_and_tells_what_one_left():
    events: list = []
    pool = recording_pool(events, broken="a")
    pool.get(A), pool.get(B)
    with pytest.raises(AssertionError, match="processes of a left after down"):
        pool.close()
    assert sorted(events) == [("down", "a"), ("down", "b"), ("up", "a"), ("up", "b")]
    pool.close()  # nothing left to down
    assert len(events) == 4


def test_a_spec_whose_up_failed_is_not_brought_up_again_for_every_test():
    tries: list = []

    def bring_up(spec: dict) -> None:
        tries.append(spec["name"])
        raise TimeoutError("the hosts did not join")

    pool = ClusterPool(bring_up, lambda cluster: None)
    with pytest.raises(TimeoutError):
        pool.get(A)
    with pytest.raises(RuntimeError, match="the cluster a failed to come up for an earlier test: TimeoutError: the hosts"):
        pool.get(A)
    assert tries == ["a"]
