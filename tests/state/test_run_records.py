"""One run per slice, however many are submitted at once: "slices free? then they are this
run's" is one transaction (RunStore.claim), used by Cluster.submit; a submit that fails
after its claim frees the slices. No Ray: the run store from several processes, and
`Cluster.submit` from several threads with its Ray steps (connect, keeping the code, supervisor) faked."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path

import pytest
from race_workers import SPAWN, claim_rounds, start, stop_all

from podmanager.api import Cluster
from podmanager.core.errors import SpecError
from podmanager.core.workload import Workload
from podmanager.state.run_records import RunStore

ROUNDS = 25


def test_concurrent_claims_from_several_processes_give_a_slice_to_exactly_one_run(podmanager_home):
    workers = 4
    barrier, results = SPAWN.Barrier(workers), SPAWN.Queue()
    procs = [start(claim_rounds, str(podmanager_home), w, ROUNDS, barrier, results) for w in range(workers)]
    try:
        outcomes = [results.get(timeout=120) for _ in range(workers * ROUNDS)]
    finally:
        stop_all(procs)
    assert [proc.exitcode for proc in procs] == [0] * workers
    store = RunStore()
    for round_ in range(ROUNDS):
        these = [o for o in outcomes if o[0] == round_]
        winners = [run_id for _, run_id, holder in these if holder is None]
        assert len(winners) == 1, f"round {round_}: {len(winners)} runs got slice 0: {winners}"
        # Every loser was told which run holds the slice, and only the winner was written.
        assert {holder for _, run_id, holder in these if holder is not None} == set(winners)
        assert [r.run_id for r in store.list(f"c{round_}")] == winners


# ------------------------------------------------------------------ Cluster.submit


SPEC = {"name": "claims", "zones": ["zone-a"], "slices": [{"accelerator": "v4-8", "count": 2}],
        "simulation": {"create_latency_s": 0.0, "delete_latency_s": 0.0}}


class _Hosts:
    def connect(self) -> bool:
        return True

    def head_problem(self) -> None:
        return None  # a live head


class _Gate:
    """Holds every submit in keeping its code until all submits have either got there or ended,
    so a check-then-insert submit lets them all past its check."""

    def __init__(self, parties: int):
        self.parties = parties
        self.arrived: set[threading.Thread] = set()  # the threads (an ident is reused once its thread ends)
        self.condition = threading.Condition()

    def arrive(self) -> None:
        with self.condition:
            self.arrived.add(threading.current_thread())
            self.condition.notify_all()

    def wait_for_all(self) -> None:
        with self.condition:
            self.condition.wait_for(lambda: len(self.arrived) == self.parties, timeout=30)


@pytest.fixture
def faked_ray(monkeypatch, tmp_path):
    """Cluster.submit without Ray: `gate` paces the keeping of the code, `started` lists the supervisors started."""
    state: dict = {"gate": None, "started": [], "fail_start": None}
    ids = itertools.count()

    def keep(code, cluster, run_id):  # type: ignore[no-untyped-def]
        if state["gate"] is not None:
            state["gate"].arrive()
            state["gate"].wait_for_all()

    def start_supervisor(cluster, run_id, code):  # type: ignore[no-untyped-def]
        if state["fail_start"] is not None:
            raise state["fail_start"]
        state["started"].append(run_id)

    monkeypatch.setattr("podmanager.attempts.package.keep", keep)
    monkeypatch.setattr("podmanager.supervision.supervisor_actor.start_supervisor", start_supervisor)
    monkeypatch.setattr("podmanager.api.submit.new_run_id", lambda workload: f"run-{next(ids)}")
    return state


def cluster(name: str = "claims") -> Cluster:
    target = Cluster.from_dict({**SPEC, "name": name}, dry_run=True)
    target.runtime._hosts, target.runtime._hosts_built = _Hosts(), True  # type: ignore[assignment] - connect() says the head is there
    return target


def workload(tmp_path: Path) -> Workload:
    return Workload(command=["train"], working_dir=str(tmp_path), slices=[0])


def test_concurrent_submits_on_one_slice_accept_exactly_one_and_name_it_to_the_others(faked_ray, tmp_path):
    submitters = 3
    for round_ in range(20):
        gate = faked_ray["gate"] = _Gate(submitters)
        accepted: list[str] = []
        refused: list[str] = []

        def submit(target: Cluster) -> None:
            try:
                accepted.append(target.submit(workload(tmp_path)).run_id)
            except SpecError as busy:
                refused.append(busy.message)
            finally:
                gate.arrive()

        threads = [threading.Thread(target=submit, args=(cluster(f"claims-{round_}"),)) for _ in range(submitters)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert len(accepted) == 1, f"round {round_}: {len(accepted)} runs accepted on slice 0: {accepted}"
        assert refused == [f"run: slice(s) [0] are busy with run {accepted[0]} (starting)"] * (submitters - 1)
        assert [r.run_id for r in RunStore().active(f"claims-{round_}")] == accepted
    assert len(faked_ray["started"]) == 20  # one supervisor per round


def test_a_submit_that_fails_after_its_claim_frees_the_slices(faked_ray, tmp_path):
    target = cluster()
    faked_ray["fail_start"] = RuntimeError("the head went away")
    with pytest.raises(RuntimeError, match="the head went away"):
        target.submit(workload(tmp_path))
    assert RunStore().list("claims") == []  # nothing claimed, nothing spent
    said = [e for e in target.events() if e.kind == "run_not_started"]
    assert len(said) == 1 and "slice(s) [0] are free again" in said[0].message

    faked_ray["fail_start"] = None
    handle = target.submit(workload(tmp_path))  # the slice is free for the next run
    assert [r.run_id for r in RunStore().active("claims")] == [handle.run_id]


def test_a_program_left_out_of_the_package_is_refused_and_claims_no_slice(faked_ray, tmp_path):
    # There, but not in the package: .gitignore leaves it out (the code is packed before the claim).
    (tmp_path / "secret.py").write_text("print('never shipped')\n")
    (tmp_path / ".gitignore").write_text("secret.py\n")
    target = cluster()
    with pytest.raises(SpecError, match="secret.py is left out of what is shipped"):
        target.submit(Workload(entrypoint="secret.py", working_dir=str(tmp_path), slices=[0]))
    assert RunStore().list("claims") == [] and faked_ray["started"] == []


def test_runs_submitted_in_the_same_millisecond_on_other_slices_get_ids_of_their_own(faked_ray, tmp_path,
                                                                                   monkeypatch):
    monkeypatch.setattr("podmanager.api.submit.new_run_id", lambda workload: "train-20250101-120000-123")
    first = cluster().submit(Workload(command=["train"], working_dir=str(tmp_path), slices=[0]))
    second = cluster().submit(Workload(command=["train"], working_dir=str(tmp_path), slices=[1]))
    assert (first.run_id, second.run_id) == ("train-20250101-120000-123", "train-20250101-120000-123-2")
    assert sorted(r.run_id for r in RunStore().active("claims")) == [first.run_id, second.run_id]
    assert faked_ray["started"] == [first.run_id, second.run_id]
