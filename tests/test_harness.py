"""The suite's own harness: what every test may rely on, however the runner was started."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from cluster_pool import FRESH, SPENDS, ClusterPool, order_by_spec, register
from fired_faults import FiredFaults
from local_reference import uninterrupted_run

from podmanager.cloud.base import CLUSTER_LABEL, SLICE_LABEL, Node, NodeState
from podmanager.provisioning.plan import Observed

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


class SlowCloud:
    """A dry-run cluster's runtime as `FiredFaults` uses it, on a loaded machine: one READY node
    for slice 0; a preemption reaches the cloud only once `answer` is set, and an announced one
    lands only when `land` is called (the node preempted, and a replacement made under its name)."""

    name = "c"

    def __init__(self) -> None:
        self.answer = threading.Event()
        self.node = Node(name="c-s0", zone="z", accelerator_type="v4-8", state=NodeState.READY,
                         labels={CLUSTER_LABEL: "c", SLICE_LABEL: "0"}, create_time=1.0000004)
        self.preempted: list[tuple[str, float]] = []
        self.landed = False
        self.simulator = self

    def observe(self) -> Observed:
        """As the Cloud TPU API reports the nodes: the create time to the microsecond."""
        return Observed(nodes=(dataclasses.replace(self.node, create_time=round(self.node.create_time, 6)),))

    def record(self, *event: object) -> None:
        pass

    def preempt(self, zone: str, name: str, notice_s: float = 0.0) -> None:
        self.answer.wait()
        self.preempted.append((name, notice_s))

    def land(self) -> None:
        self.node = dataclasses.replace(self.node, create_time=2.0000004)  # PREEMPTED, then made again: READY
        self.landed = True

    def all_nodes(self) -> list[Node]:
        return [self.node]


def test_a_preemption_fired_from_a_thread_has_reached_the_cloud_when_its_test_ends():
    """The printer fires it at step 50; the run ends before the cloud has answered. Left to
    itself the call would land in the next test's run on the shared cluster."""
    cloud = SlowCloud()
    with FiredFaults(cloud) as faults:
        faults.preempt(0)
        assert cloud.preempted == []  # the run has ended; the cloud answers a moment later
        threading.Timer(0.2, cloud.answer.set).start()
    assert cloud.preempted == [("c-s0", 0.0)]


def test_an_announced_preemption_has_landed_when_its_test_ends():
    """A notice's preemption lands its notice period later: not in the next test's run. (A
    node made again under the same name afterwards is not the one noticed.)"""
    cloud = SlowCloud()
    cloud.answer.set()
    with FiredFaults(cloud) as faults:
        faults.preempt(0, notice_s=30.0)
        threading.Timer(0.2, cloud.land).start()  # the run ended before its notice period did
    assert cloud.preempted == [("c-s0", 30.0)] and cloud.landed


def test_a_preemption_that_failed_in_its_thread_fails_its_test():
    cloud = SlowCloud()
    with pytest.raises(AssertionError, match="preempting slice 3: SpecError: --slice: cluster c has no node for slice 3"):
        with FiredFaults(cloud) as faults:
            faults.preempt(3)


# A training program's stand-in: its loss at each step, and a line in a file for each run of it.
COUNTS_ITS_RUNS = """
import sys
steps = int(sys.argv[sys.argv.index("--steps") + 1])
with open(sys.argv[1], "a") as runs:
    runs.write(f"{steps}\\n")
for step in range(1, steps + 1):
    print(f"step {step} loss {1 / step:.6f}")
"""


def test_an_uninterrupted_run_is_computed_once_for_every_test_that_declares_it(tmp_path):
    """Declared by two modules at their import (200 and 400 steps): one run, to 400, answers both;
    a declaration of more after it ran runs the program again."""
    program, runs = tmp_path / "train.py", tmp_path / "runs"
    program.write_text(COUNTS_ITS_RUNS)
    shorter = uninterrupted_run(str(program), 200, devices=2, args=(str(runs),))
    longer = uninterrupted_run(str(program), 400, devices=2, args=(str(runs),))
    with shorter.meanwhile() as final_loss:
        assert final_loss() == pytest.approx(1 / 200, abs=1e-6)
    assert longer.final_loss() == pytest.approx(1 / 400, abs=1e-6)
    assert shorter.losses() == longer.losses()[:200]
    assert runs.read_text().split() == ["400"]
    assert uninterrupted_run(str(program), 500, devices=2, args=(str(runs),)).final_loss() == pytest.approx(1 / 500)
    assert runs.read_text().split() == ["400", "500"]
