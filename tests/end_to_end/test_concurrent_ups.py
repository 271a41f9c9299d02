"""Concurrent `up`s (and a `down` during an `up`) of one cluster take turns: the second says
whom it waits for and then finds the work done; every slice is created once. The simulated
control plane only (no Ray): `up` in several processes at once, 20 rounds, and through the CLI."""

from __future__ import annotations

import threading

import yaml
from race_workers import SPAWN, start, stop_all, up_rounds, up_while_holding
from sim_view import sim_nodes
from typer.testing import CliRunner

from podmanager.api import Cluster
from podmanager.cli import app
from podmanager.core.clock import poll_until
from podmanager.state import StateStore

ROUNDS = 20
SPEC = {"name": "locked", "zones": ["zone-a"], "slices": [{"accelerator": "v4-8", "count": 2}],
        "simulation": {"boot_hosts": False, "create_latency_s": 0.1, "delete_latency_s": 0.01}}


def test_two_ups_at_once_create_each_slice_once_and_the_second_finds_the_work_done(podmanager_home):
    barrier, results = SPAWN.Barrier(2), SPAWN.Queue()
    procs = [start(up_rounds, str(podmanager_home), SPEC, ROUNDS, barrier, results) for _ in range(2)]
    try:
        outcomes = [results.get(timeout=120) for _ in range(2 * ROUNDS)]
    finally:
        stop_all(procs)
    assert [p.exitcode for p in procs] == [0, 0]
    waited = 0
    for round_ in range(ROUNDS):
        name = f"locked-{round_}"
        ups = [(pid, said) for r, pid, said in outcomes if r == round_]
        creates = [m for _, said in ups for kind, m in said if kind == "slice_creating"]
        assert len(creates) == 2, f"round {round_}: slices created {len(creates)} times: {creates}"
        plans = sorted(m for _, said in ups for kind, m in said if kind == "up_plan")
        assert plans == [f"plan for {name}: create slices 0-1 (v4-8, missing)",
                         f"plan for {name}: keep slices 0-1 (v4-8, READY)"]
        for pid, said in ups:
            waits = [m for kind, m in said if kind == "waiting"]
            other = next(p for p, _ in ups if p != pid)
            assert waits in ([], [f"waiting for another podmanager up of {name} (pid {other})"])
            waited += len(waits)
    assert waited >= 1  # the race was run: in some rounds (most, as a rule) one up found the other at work
    assert len(sim_nodes("podmanager-sim")) == 2 * ROUNDS


def test_up_says_whom_it_waits_for_and_then_finds_the_work_done(podmanager_home, tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    held, release = SPAWN.Event(), SPAWN.Event()
    other = start(up_while_holding, str(podmanager_home), SPEC, held, release)
    outcome: list = []
    try:
        assert held.wait(timeout=60)
        ours = threading.Thread(target=lambda: outcome.append(CliRunner().invoke(
            app, ["up", "-f", str(spec), "--dry-run"], prog_name="podmanager")))
        ours.start()
        store = StateStore()
        said = poll_until(lambda: [e for e in store.events("locked") if e.kind == "waiting"], timeout_s=60,
                          interval_s=0.05, what="the second up to say it waits")
        assert said[0].message == f"waiting for another podmanager up of locked (pid {other.pid})"
        release.set()  # the other up goes ahead and creates the slices
        ours.join(timeout=120)
    finally:
        release.set()
        stop_all([other])
    [result] = outcome
    assert result.exit_code == 0, result.output
    assert f"waiting for another podmanager up of locked (pid {other.pid})" in result.output
    assert "plan for locked: keep slices 0-1 (v4-8, READY)" in result.output
    assert "slice_creating" not in result.output  # the first up created them
    assert other.exitcode == 0
    assert sorted(n.name for n in sim_nodes("podmanager-sim")) == ["locked-s0", "locked-s1"]


def test_down_waits_for_an_up_in_progress(podmanager_home):
    held, release = SPAWN.Event(), SPAWN.Event()
    other = start(up_while_holding, str(podmanager_home), SPEC, held, release)
    try:
        assert held.wait(timeout=60)
        said: list[str] = []
        down = threading.Thread(target=Cluster.from_dict(SPEC, dry_run=True, on_event=lambda e: said.append(
            e.message)).down)
        down.start()
        poll_until(lambda: any(m.startswith("waiting for another podmanager up of locked") for m in said),
                   timeout_s=60, interval_s=0.05, what="down to wait for the up")
        release.set()
        down.join(timeout=120)
    finally:
        release.set()
        stop_all([other])
    assert other.exitcode == 0
    assert sim_nodes("podmanager-sim") == []  # down came after the up, and removed its slices
    assert StateStore().get_cluster("locked") is None
