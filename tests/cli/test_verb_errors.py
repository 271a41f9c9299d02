"""A verb's errors where the user meets them: a cluster name that does not exist exits 2 and makes
no folder (a torn-down cluster still shows its history), and an argument error names the verb
typed, not the API's words."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

import podmanager.api
from podmanager.cli import app
from podmanager.core.events import EventKind
from podmanager.core.spec import parse_spec
from podmanager.core.workload import Workload
from podmanager.state import StateStore
from podmanager.state.run_records import RunRecord, RunStore

PROGRAM = Workload(command=["true"])  # a record names what its run runs

SPEC = {"name": "c", "backend": "simulated", "slices": [{"accelerator": "v4-8"}]}


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def test_events_and_runs_of_an_unknown_name_exit_2_and_of_a_torn_down_cluster_show_its_history():
    assert invoke("events", "-c", "nope").exit_code == 2
    assert invoke("runs", "-c", "nope").exit_code == 2
    store = StateStore()
    store.add_event("gone", EventKind.UP, "1 slice(s) on simulated")  # the cluster record went with `down`
    RunStore().create(RunRecord("gone-run", "gone", PROGRAM, [0], {}, None, status="succeeded"))
    events = invoke("events", "-c", "gone")
    assert events.exit_code == 0 and "1 slice(s) on simulated" in events.output
    runs = invoke("runs", "-c", "gone")
    assert runs.exit_code == 0 and "gone-run" in runs.output
    status = invoke("status", "-c", "gone")
    assert status.exit_code == 2 and "torn down" in status.output


def test_a_verbs_argument_errors_name_the_verb_typed(tmp_path, monkeypatch):
    """serve's program errors say serve:, cancel's run id errors say cancel: (the API says run:/RUN:)."""
    from podmanager.api.submission import run_slices

    spec = parse_spec(SPEC)
    real_resolve = podmanager.api.resolve_cluster
    stand_in = SimpleNamespace(name="c", close=lambda: None,
                               serve=lambda workload, options, budgets: run_slices(spec, workload))
    monkeypatch.setattr(podmanager.api, "resolve_cluster", lambda name: stand_in)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "requirements.txt").write_text("numpy\n")
    served = invoke("serve", "-c", "c", "--detach", "requirements.txt")
    assert served.exit_code == 2
    assert "serve: requirements.txt is not a program" in served.output and "run:" not in served.output
    assert invoke("serve", "-c", "c").output.startswith("error: serve: name a program")
    monkeypatch.setattr(podmanager.api, "resolve_cluster", real_resolve)
    StateStore().save_cluster("c", spec, "up")
    cancelled = invoke("cancel", "-c", "c", "nope")
    assert cancelled.exit_code == 2
    assert "cancel: no run 'nope' in cluster c" in cancelled.output and "RUN:" not in cancelled.output


@pytest.mark.parametrize("verb", [["events"], ["logs"], ["runs"], ["status"], ["attach", "r"], ["cancel", "r"],
                                  ["ray-env"]])
def test_a_read_only_verb_on_an_unknown_cluster_makes_no_folder(verb, podmanager_home):
    result = invoke(*verb, "-c", "nope")
    assert result.exit_code == 2
    assert not (podmanager_home / "clusters" / "nope").exists()


def test_dashboard_of_a_service_the_cluster_does_not_serve_exits_2_naming_the_flag_and_the_list(monkeypatch):
    from podmanager.channel.cluster_status import ClusterStatus, ServiceEndpoint

    status = ClusterStatus(name="demo", backend="simulated", project="p", slices=[], services=[
        ServiceEndpoint(service_id="model-svc-1", endpoint="http://127.0.0.1:8123", slices=[0])])
    from podmanager.api.cluster import Cluster

    local = SimpleNamespace(name="demo", status=lambda: status)  # this machine is the controller
    local.reach_here = lambda target, port=0: Cluster.reach_here(local, target, port=port)
    monkeypatch.setattr(podmanager.api, "resolve_cluster", lambda name: local)
    found = invoke("dashboard", "-c", "demo", "--service", "model-svc-1")
    assert found.exit_code == 0 and found.output.strip() == "http://127.0.0.1:8123"
    unknown = invoke("dashboard", "-c", "demo", "--service", "nope")
    assert unknown.exit_code == 2
    assert "--service nope" in unknown.output and "'podmanager runs -c demo' lists its services" in unknown.output


def test_an_unknown_name_lists_the_clusters_reached_through_a_controller_vm_too():
    from podmanager.client import pinned

    StateStore().save_cluster("here", parse_spec({**SPEC, "name": "here"}), "up")
    pinned.save_spec("lap", "{}")  # the pointer `up` and `connect` leave for a cluster whose controller is a VM
    for verb in ("status", "events", "runs"):
        result = invoke(verb, "-c", "nope")
        assert result.exit_code == 2 and "no cluster named 'nope' (known: here, lap)" in result.output, result.output
