"""`down` when the local state is lost: it finds the cluster by label in every simulated
project, never says "down" while something labelled with it exists, and a repeat says
there is nothing to delete and succeeds."""

import os
import shutil
import threading

from sim_view import sim_nodes
from typer.testing import CliRunner

from podmanager.api import Cluster, StateStore, down_by_label
from podmanager.cli import app
from podmanager.core.clock import poll_until
from podmanager.state.lock import cluster_lock

runner = CliRunner()

FAST = {"boot_hosts": False, "create_latency_s": 0.01, "delete_latency_s": 0.01}


def _up_and_forget(name: str, project: str, podmanager_home) -> None:
    """A cluster in a non-default simulated project whose local state is then lost."""
    Cluster.from_dict({"name": name, "project": project, "slices": [{"accelerator": "v4-8", "count": 2}],
                       "simulation": FAST}, dry_run=True).up()
    (podmanager_home / "state.db").unlink()
    shutil.rmtree(podmanager_home / "clusters")  # with it the spec copies, which would mark the store as damaged
    assert len(sim_nodes(project)) == 2


def test_cli_down_dry_run_searches_every_simulated_project(podmanager_home):
    sim_nodes("podmanager-sim")  # the default project exists too, empty
    _up_and_forget("lost", "elsewhere", podmanager_home)

    result = runner.invoke(app, ["down", "-c", "lost", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert sim_nodes("elsewhere") == []
    assert "elsewhere" in result.output and "is down" in result.output

    again = runner.invoke(app, ["down", "-c", "lost", "--dry-run"])
    assert again.exit_code == 0, again.output
    assert "nothing to delete" in again.output and "is down" not in again.output


def test_cli_repeated_down_without_flags_says_nothing_to_delete(podmanager_home):
    spec = podmanager_home.parent / "spec.yaml"
    spec.write_text("name: twice\nslices: [{accelerator: v4-8}]\n"
                    "simulation: {boot_hosts: false, create_latency_s: 0.01, delete_latency_s: 0.01}\n")
    assert runner.invoke(app, ["up", "-f", str(spec), "--dry-run"]).exit_code == 0
    first = runner.invoke(app, ["down", "-c", "twice"])
    assert first.exit_code == 0, first.output

    second = runner.invoke(app, ["down", "-c", "twice"])
    assert second.exit_code == 0, second.output
    assert "nothing to delete" in second.output
    assert "--project" in second.output  # how to search Google Cloud instead


def test_cli_down_without_flags_finds_a_lost_simulated_cluster(podmanager_home):
    _up_and_forget("lost", "elsewhere", podmanager_home)
    result = runner.invoke(app, ["down", "-c", "lost"])
    assert result.exit_code == 0, result.output
    assert sim_nodes("elsewhere") == []
    assert "is down" in result.output


def test_api_down_by_label_reports_where_it_deleted(podmanager_home):
    _up_and_forget("lost", "elsewhere", podmanager_home)
    _up_and_forget("other", "podmanager-sim", podmanager_home)

    report = down_by_label("lost", dry_run=True, store=StateStore())
    assert report.deleted_in == ["elsewhere"]
    assert sim_nodes("elsewhere") == []
    assert sorted(n.name for n in sim_nodes("podmanager-sim")) == ["other-s0", "other-s1"]

    again = down_by_label("lost", dry_run=True, store=StateStore())
    assert again.deleted_in == [] and set(again.searched) == {"elsewhere", "podmanager-sim"}


def test_api_down_by_label_in_a_named_project_only(podmanager_home):
    _up_and_forget("lost", "elsewhere", podmanager_home)
    report = down_by_label("lost", dry_run=True, project="podmanager-sim", store=StateStore())
    assert report.deleted_in == [] and report.searched == ["podmanager-sim"]
    assert len(sim_nodes("elsewhere")) == 2  # not searched, not touched


def test_down_by_label_waits_for_an_up_of_the_name_under_way(podmanager_home):
    _up_and_forget("lost", "elsewhere", podmanager_home)
    store = StateStore()
    reports = []
    with cluster_lock("lost", "up", timeout_s=10):  # an `up` of the same name is working
        downing = threading.Thread(target=lambda: reports.append(down_by_label("lost", dry_run=True, store=store)))
        downing.start()
        poll_until(lambda: store.events("lost", kind="waiting"), timeout_s=30, interval_s=0.02,
                   what="down to wait for the lock")
        assert len(sim_nodes("elsewhere")) == 2  # nothing taken while `up` holds it
        assert f"another podmanager up of lost (pid {os.getpid()})" in store.events("lost", kind="waiting")[0].message
    downing.join(timeout=60)
    assert reports and reports[0].deleted_in == ["elsewhere"]
    assert sim_nodes("elsewhere") == []
