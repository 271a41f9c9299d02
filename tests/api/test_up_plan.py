"""`up` of an edited spec: the plan it shows before changing anything (and gives as JSON),
its refusal to take a slice from an active run, and recovery that converges to the stored
spec, never re-creating a slice the spec dropped. The simulated control plane only: no Ray."""

from __future__ import annotations

import json

import pytest
from fake_index import serve_index
from sim_view import sim_control, sim_nodes
from typer.testing import CliRunner

from podmanager.api import Cluster
from podmanager.api.up_plan import UpPlan, in_the_way, runs_in_the_way
from podmanager.cli import app
from podmanager.cloud.base import CLUSTER_LABEL, SLICE_LABEL, Node, NodeState
from podmanager.cluster.cluster_runtime import ClusterRuntime
from podmanager.core.errors import SpecError
from podmanager.core.spec import parse_spec
from podmanager.core.workload import Workload
from podmanager.provisioning.plan import (
    Observed,
    changes,
    describe_changes,
    desired_slices,
)
from podmanager.state.run_records import RunRecord, RunStore

runner = CliRunner()


def spec_text(count: int = 2, accelerator: str = "v4-8", boot: str = "") -> str:
    return f"""
name: edits
zones: [zone-a]
slices:
  - accelerator: {accelerator}
    count: {count}
simulation:
  create_latency_s: 0.01
  delete_latency_s: 0.01
  boot_hosts: false
""" + (f"boot: {boot}\n" if boot else "")


def up(tmp_path, *extra, count: int = 2, accelerator: str = "v4-8", boot: str = ""):
    path = tmp_path / f"spec-{count}-{accelerator}.yaml"
    path.write_text(spec_text(count, accelerator, boot))
    return runner.invoke(app, ["up", "-f", str(path), "--dry-run", *extra], prog_name="podmanager")


def nodes() -> list[str]:
    return sorted(n.name for n in sim_nodes("podmanager-sim"))


def active_run(run_id: str, slices: list[int]) -> RunRecord:
    """A run going on these slices, as its record says (its supervisor is not needed here)."""
    return RunStore().create(RunRecord(run_id, "edits", Workload(command=["true"]), slices, {}, None, status="running"))


def lines(output: str, *words: str) -> list[int]:
    """Numbers of the output lines that hold each word, in order of the words."""
    text = output.splitlines()
    return [next(i for i, line in enumerate(text) if word in line) for word in words]


def test_up_prints_its_plan_before_it_changes_anything(tmp_path):
    first = up(tmp_path, count=2)
    assert first.exit_code == 0, first.output
    assert "plan for edits: create slices 0-1 (v4-8, missing)" in first.output
    plan_line, create_line = lines(first.output, "up_plan", "slice_creating")
    assert plan_line < create_line

    again = up(tmp_path, count=2)  # nothing to do, and it says so
    assert "plan for edits: keep slices 0-1 (v4-8, READY)" in again.output
    assert "slice_creating" not in again.output and "slice_deleting" not in again.output

    smaller = up(tmp_path, count=1)
    assert smaller.exit_code == 0, smaller.output
    assert "plan for edits: delete slice 1 (v4-8, not in the spec); keep slice 0 (v4-8, READY)" in smaller.output
    plan_line, delete_line = lines(smaller.output, "up_plan", "slice_deleting")
    assert plan_line < delete_line
    assert nodes() == ["edits-s0"]


def test_up_json_gives_the_plan_and_the_final_status(tmp_path):
    assert up(tmp_path, count=1).exit_code == 0
    result = up(tmp_path, "--json", count=2)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)  # progress went to stderr: stdout is one JSON object
    assert [(c["kind"], c["slice"], c["node"], c["reason"]) for c in report["plan"]["changes"]] == [
        ("keep", 0, "edits-s0", "READY"), ("create", 1, "edits-s1", "missing")]
    assert report["plan"]["summary"] == "create slice 1 (v4-8, missing); keep slice 0 (v4-8, READY)"
    assert [(s["name"], s["state"]) for s in report["status"]["slices"]] == [
        ("edits-s0", "READY"), ("edits-s1", "READY")]
    assert "slice_creating" in result.stderr


def test_up_refuses_to_delete_a_slice_an_active_run_uses_and_names_the_run(tmp_path):
    assert up(tmp_path, count=2).exit_code == 0
    active_run("train-1", [0, 1])
    stored = Cluster.from_name("edits").spec

    result = up(tmp_path, count=1)
    assert result.exit_code == 2, result.output
    assert "run train-1 (running) runs on slice 1 (edits-s1), which the spec deletes: not in the spec" in result.stderr
    assert "--force" in result.stderr and "nothing was changed" in result.stderr
    assert nodes() == ["edits-s0", "edits-s1"]
    assert Cluster.from_name("edits").spec == stored  # the edited spec is not stored either

    changed = up(tmp_path, count=2, accelerator="v4-16")  # a replaced slice is taken as well
    assert changed.exit_code == 2
    assert "slice 0 (edits-s0), which the spec replaces: accelerator changed from v4-8 to v4-16" in changed.stderr


def test_up_takes_slices_no_run_uses_and_replaces_dead_ones_under_a_run(tmp_path):
    assert up(tmp_path, count=2).exit_code == 0
    active_run("train-0", [0])
    sim_control().preempt("zone-a", "edits-s0")  # on-demand: TERMINATED

    result = up(tmp_path, count=1)  # slice 1 is free; slice 0 is dead (its run's supervisor would replace it)
    assert result.exit_code == 0, result.output
    assert "delete slice 1 (v4-8, not in the spec); replace slice 0 (v4-8, node is TERMINATED)" in result.output
    assert nodes() == ["edits-s0"]
    assert RunStore().get("train-0").status == "running"


def test_a_runs_recovery_converges_to_the_stored_spec_and_never_recreates_a_dropped_slice(tmp_path):
    assert up(tmp_path, count=2).exit_code == 0
    supervised = ClusterRuntime.from_name("edits", run_id="train-1")  # a run's supervisor holds the spec of its start
    assert up(tmp_path, count=1).exit_code == 0  # no run in the way: the edit goes through

    assert supervised.dropped_slices([0, 1]) == [1]
    supervised.delete_slices([0], reason="preemption")
    supervised.restore_slices()
    assert nodes() == ["edits-s0"]  # slice 0 replaced, slice 1 not created again
    supervised.heal()
    assert nodes() == ["edits-s0"]

    assert up(tmp_path, count=3).exit_code == 0  # and a slice the spec added is not deleted by a recovery
    supervised.delete_slices([0], reason="preemption")
    supervised.restore_slices()
    assert nodes() == ["edits-s0", "edits-s1", "edits-s2"]


def test_the_plan_of_an_empty_cloud_creates_every_slice_in_the_first_zone():
    spec = parse_spec({"name": "p", "backend": "simulated", "zones": ["z"], "slices": [{"accelerator": "v4-8"}]})
    planned = changes(desired_slices(spec), Observed())
    assert [(c.kind, c.node, c.zone) for c in planned] == [("create", "p-s0", "z")]
    assert describe_changes(planned) == "create slice 0 (v4-8, missing)"
    assert describe_changes([]) == "nothing"


def test_a_ready_slice_whose_host_failed_to_boot_is_replaced_and_the_others_kept():
    spec = parse_spec({"name": "p", "backend": "simulated", "zones": ["z"],
                       "slices": [{"accelerator": "v4-8", "count": 2}]})
    ready = [Node(f"p-s{i}", "z", "v4-8", NodeState.READY, {CLUSTER_LABEL: "p", SLICE_LABEL: str(i)})
             for i in range(2)]
    planned = changes(desired_slices(spec), Observed(nodes=ready), {1: "worker 0 failed to boot: download x failed"})
    assert [(c.kind, c.slice_index, c.failed_boot) for c in planned] == [("keep", 0, False), ("replace", 1, True)]
    assert describe_changes(planned) == ("replace slice 1 (v4-8, worker 0 failed to boot: download x failed); "
                                         "keep slice 0 (v4-8, READY)")


def test_a_ready_slice_booted_with_other_boot_settings_is_replaced_one_without_the_label_kept():
    def spec(**boot):
        return parse_spec({"name": "p", "backend": "simulated", "zones": ["z"], "boot": boot,
                           "slices": [{"accelerator": "v4-8", "count": 3}]})

    booted = desired_slices(spec(packages=["orbax-checkpoint==0.11.0"]))
    ready = [Node(f"p-s{i}", "z", "v4-8", NodeState.READY, dict(booted[i].request.labels)) for i in range(2)]
    ready.append(Node("p-s2", "z", "v4-8", NodeState.READY, {CLUSTER_LABEL: "p", SLICE_LABEL: "2"}))  # older podmanager

    assert [c.kind for c in changes(booted, Observed(nodes=ready))] == ["keep"] * 3
    edited = changes(desired_slices(spec(packages=["orbax-checkpoint==0.11.1"])), Observed(nodes=ready))
    assert [(c.kind, c.slice_index, c.edited, c.failed_boot) for c in edited] == [
        ("replace", 0, True, True), ("replace", 1, True, True), ("keep", 2, False, False)]
    assert "boot settings changed" in edited[0].reason
    # A slice whose host failed to boot says so, whatever else changed (the spec's fix, often).
    fixed = changes(desired_slices(spec(packages=["orbax-checkpoint==0.11.1"])), Observed(nodes=ready),
                    {0: "worker 0 failed to boot: download x failed"})
    assert (fixed[0].kind, fixed[0].reason, fixed[0].failed_boot) == (
        "replace", "worker 0 failed to boot: download x failed", True)
    # Other edits leave the boot settings as they were; another runtime_version does not.
    assert desired_slices(spec(packages=["orbax-checkpoint==0.11.0"]))[0].request.labels == booted[0].request.labels
    other_image = parse_spec({"name": "p", "backend": "simulated", "zones": ["z"],
                              "boot": {"packages": ["orbax-checkpoint==0.11.0"]},
                              "slices": [{"accelerator": "v4-8", "count": 3, "runtime_version": "tpu-vm-base"}]})
    assert desired_slices(other_image)[0].request.labels != booted[0].request.labels


def test_a_ready_slice_whose_hosts_run_another_software_is_replaced_and_a_run_on_it_is_not_interrupted():
    spec = parse_spec({"name": "p", "backend": "simulated", "zones": ["z"],
                       "slices": [{"accelerator": "v4-8", "count": 3}]})
    desired = desired_slices(spec)
    nodes = [Node(f"p-s{i}", "z", "v4-8", NodeState.READY, dict(desired[i].request.labels)) for i in range(2)]
    nodes.append(Node("p-s2", "z", "v4-8", NodeState.REPAIRING, dict(desired[2].request.labels)))
    drift = "worker 0 runs podmanager 0.1.0+haaaa -> 0.1.0+hbbbb"
    planned = changes(desired, Observed(nodes=nodes), software_changed={1: drift, 2: drift})
    # Only a READY slice is judged (a REPAIRING one is waited for, as always).
    assert [(c.kind, c.slice_index, c.edited, c.failed_boot) for c in planned] == [
        ("keep", 0, False, False), ("replace", 1, True, True), ("keep", 2, False, False)]
    assert describe_changes(planned[1:2]) == (
        "replace slice 1 (v4-8, software changed: worker 0 runs podmanager 0.1.0+haaaa -> 0.1.0+hbbbb; a VM "
        "installs its software only at boot)")
    # A host that failed to boot says that first.
    failed = changes(desired, Observed(nodes=nodes), {1: "worker 0 failed to boot: x"}, {1: drift})
    assert failed[1].reason == "worker 0 failed to boot: x"
    # A plain `up` refuses while a run holds the slice, naming it (--force cancels the run).
    plan = UpPlan("p", planned)
    running = RunRecord("train-1", "p", Workload(command=["true"]), [1], {}, None, status="running")
    blocked = runs_in_the_way(plan, [running])
    assert [(run.run_id, hit) for run, hit in blocked] == [("train-1", [1])]
    assert "run train-1 (running) runs on slice 1 (p-s1)" in str(in_the_way(plan, blocked))
    assert "--force" in in_the_way(plan, blocked).hint


def test_an_edit_of_boot_packages_makes_the_next_up_replace_the_ready_slices(tmp_path):
    assert up(tmp_path, count=2, boot="{packages: [six==1.16.0]}").exit_code == 0
    made = {n.name: n.create_time for n in sim_nodes("podmanager-sim")}

    same = up(tmp_path, count=2, boot="{packages: [six==1.16.0]}")
    assert "plan for edits: keep slices 0-1 (v4-8, READY)" in same.output

    edited = up(tmp_path, "--json", count=2, boot="{packages: [six==1.17.0]}")
    assert edited.exit_code == 0, edited.output
    report = json.loads(edited.stdout)
    assert [(c["kind"], c["slice"], c["edited"]) for c in report["plan"]["changes"]] == [
        ("replace", 0, True), ("replace", 1, True)]
    assert all("boot settings changed" in c["reason"] for c in report["plan"]["changes"])
    again = {n.name: n.create_time for n in sim_nodes("podmanager-sim")}
    assert sorted(again) == sorted(made) and all(again[name] != made[name] for name in made)


def test_a_typo_in_boot_packages_is_refused_before_up_changes_anything(tmp_path):
    assert up(tmp_path, count=1).exit_code == 0
    made = {n.name: n.create_time for n in sim_nodes("podmanager-sim")}
    # Hosts that boot, from the controller's image: they would install boot.packages, so up resolves
    # them first, here against an index without the misspelt package (no network in a test).
    with serve_index(tmp_path / "index") as index:
        path = tmp_path / "typo.yaml"
        path.write_text(spec_text(1, boot=f"{{packages: [numpyy], index_url: '{index.url}'}}").replace(
            "boot_hosts: false", "boot_hosts: true"))
        typo = runner.invoke(app, ["up", "-f", str(path), "--dry-run"], prog_name="podmanager")
    assert typo.exit_code == 2, typo.output
    assert "boot.packages" in typo.output and "numpyy" in typo.output
    assert "up_plan" not in typo.output  # refused before the plan: nothing recorded, deleted or made
    assert {n.name: n.create_time for n in sim_nodes("podmanager-sim")} == made


def test_dropping_the_spare_after_a_swap_deletes_the_idle_slice_not_the_runs(tmp_path):
    def with_spares(spares: int):
        path = tmp_path / f"spares-{spares}.yaml"
        path.write_text(spec_text(2).replace("    count: 2\n", f"    count: 2\n    spares: {spares}\n"))
        return runner.invoke(app, ["up", "-f", str(path), "--dry-run"], prog_name="podmanager")

    assert with_spares(1).exit_code == 0
    assert RunStore().spares("edits") == [2]
    run = active_run("train-1", [0, 1])
    assert RunStore().swap_spare(run, lost=0, spare=2)  # slice 0 was lost: the run goes on on 1 and 2

    dropped = with_spares(0)
    assert dropped.exit_code == 0, dropped.output  # before: refused, as it deleted the run's slice 2
    assert "plan for edits: delete slice 0 (v4-8, not in the spec); keep slices 1-2 (v4-8, READY)" in dropped.output
    assert nodes() == ["edits-s1", "edits-s2"]
    assert RunStore().get("train-1").status == "running" and RunStore().spares("edits") == []
    again = with_spares(0)  # the same file again: the numbering the last up left
    assert "plan for edits: keep slices 1-2 (v4-8, READY)" in again.output


def test_the_api_refuses_with_a_spec_error(tmp_path):
    assert up(tmp_path, count=2).exit_code == 0
    active_run("train-1", [1])
    smaller = Cluster.from_dict({"name": "edits", "zones": ["zone-a"], "slices": [{"accelerator": "v4-8"}],
                                 "simulation": {"boot_hosts": False}}, dry_run=True)
    with pytest.raises(SpecError, match="run train-1 \\(running\\) runs on slice 1 \\(edits-s1\\)"):
        smaller.up()
    assert nodes() == ["edits-s0", "edits-s1"]
