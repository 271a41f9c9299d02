"""A cluster's history kept on the user's machine before `down` deletes its controller VM
(api/history_bundle.py, client/kept_history.py): the controller's bundle unpacked owner-only, the
page served from it after `down` saying so, and `down` going on when it cannot be kept."""

from __future__ import annotations

import io
import json
import stat
import zipfile

import pytest
from dashboard_records import CLUSTER, checkpoints_of, preempted_run

from podmanager.api import dashboard, history_bundle
from podmanager.attempts.logs import RunFolder
from podmanager.client import controller_machine, kept_history, remote
from podmanager.core.events import EventKind
from podmanager.core.spec import parse_spec
from podmanager.state import StateStore
from podmanager.state.service_history import Point, ServiceHistory
from podmanager.state.services import ServiceRecord, ServiceStore


def controller_records(tmp_path) -> StateStore:
    """What a controller's store holds after its `down` job: a run preempted once, its metrics, a service."""
    store = StateStore()
    preempted_run(store=store)
    checkpoints_of(store=store)
    folder = RunFolder(CLUSTER, "r1")
    for step in range(0, 21):
        folder.append_progress(1 if step <= 10 else 2, step, 1000.0 + step, 1.0 / (step + 1), {})
    ServiceStore().create(ServiceRecord(service_id="s1", cluster=CLUSTER, program="p", slices=[1],
                                        endpoint="http://x", replica_url="ws://x"))
    ServiceHistory().add(CLUSTER, "s1", Point(1000.0, 1.0, 40, 0, 3.0, 9.0, 1))
    store.set_cluster_status(CLUSTER, "down")
    return store


def laptop_keeps(data: bytes, *, deleted_at: float = 1_700_000_000.0) -> kept_history.KeptHistory:
    """The controller's files gone (its VM deleted), then the bundle kept."""
    StateStore().delete_cluster(CLUSTER)  # its spec's copy beside the store too
    for path in list(StateStore().path.parent.glob("state.db*")):
        path.unlink()
    for path in sorted(RunFolder(CLUSTER, "r1").folder.glob("*")):
        path.unlink()
    return kept_history.keep(CLUSTER, data, deleted_at=deleted_at)


def test_the_kept_copy_serves_the_page_read_only_and_says_the_cluster_was_deleted(tmp_path):
    data = history_bundle.bundle(controller_records(tmp_path), CLUSTER)
    found = laptop_keeps(data)
    assert stat.S_IMODE(found.folder.stat().st_mode) == 0o700
    files = [p for p in found.folder.rglob("*") if p.is_file()]
    assert files and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in files)

    page = dashboard.kept_page(CLUSTER)
    cluster = page.cluster()
    assert cluster["history"] == "history: cluster deleted at 2023-11-14 22:13:20 UTC; this copy of its records " \
                                 "was kept on this machine by `down`"
    assert cluster["state"] == "deleted" and cluster["slices"] == [] and cluster["swaps"]
    assert [r["run_id"] for r in page.run_list()["runs"]] == ["r1"]
    timeline = page.run("r1")["timeline"]
    assert len(timeline["attempts"]) == 2 and timeline["incidents"][0]["recover_s"] == 14.0
    assert [m["step"] for m in timeline["marks"] if m["kind"] == "checkpoint"] == [6, 12, 18]
    assert len(page.metric_points("r1", 0)["points"]) == 21
    assert page.service("s1")["history"] == [[1000.0, 1.0, 40, 0, 3.0, 9.0, 1]]
    assert page.logs("r1", "2/0", 0)["text"] == ""  # the hosts' output is not kept
    with pytest.raises(Exception, match="copy of c's history already"):
        page.history()


def test_a_bundle_with_a_file_outside_its_folder_is_refused_and_the_kept_copy_stays(tmp_path):
    laptop_keeps(history_bundle.bundle(controller_records(tmp_path), CLUSTER))
    bad = io.BytesIO()
    with zipfile.ZipFile(bad, "w") as archive:
        archive.writestr("../../evil.sh", "rm -rf ~")
    with pytest.raises(ValueError, match="unexpected file '../../evil.sh'"):
        kept_history.keep(CLUSTER, bad.getvalue(), deleted_at=1.0)
    assert kept_history.kept(CLUSTER).deleted_at == 1_700_000_000.0
    assert not list(kept_history.folder(CLUSTER).parent.glob(".history-*"))


def test_dashboard_after_down_serves_the_kept_copy(tmp_path):
    import urllib.request

    laptop_keeps(history_bundle.bundle(controller_records(tmp_path), CLUSTER))
    server = dashboard.open_page(CLUSTER)
    try:
        with urllib.request.urlopen(f"{server.url}{CLUSTER}/api/cluster", timeout=30) as reply:
            assert json.loads(reply.read())["history"].startswith("history: cluster deleted at ")
    finally:
        server.stop()


def test_timeline_html_after_down_reads_the_kept_copy(tmp_path):
    from typer.testing import CliRunner

    from podmanager.cli import app

    laptop_keeps(history_bundle.bundle(controller_records(tmp_path), CLUSTER))
    out = tmp_path / "r1.html"
    done = CliRunner().invoke(app, ["timeline", "r1", "--html", str(out), "-c", CLUSTER])
    assert done.exit_code == 0, done.output
    text = out.read_text()
    assert '"checkpoint"' in text and '"series": [{"attempt": 1, "step": 0' in text


def test_a_local_controllers_page_reads_its_own_records_after_down():
    store = StateStore()
    preempted_run(store=store)
    store.delete_cluster(CLUSTER)  # what `down` does to a local controller's cluster
    page = dashboard.open_page(CLUSTER)
    try:
        import urllib.request

        with urllib.request.urlopen(f"{page.url}{CLUSTER}/api/runs", timeout=30) as reply:
            assert [r["run_id"] for r in json.loads(reply.read())["runs"]] == ["r1"]
        with urllib.request.urlopen(f"{page.url}{CLUSTER}/api/cluster", timeout=30) as reply:
            assert json.loads(reply.read())["state"] == "down (its history is kept)"
    finally:
        page.stop()


class FakeRemote:
    steps: list[str] = []

    def __init__(self, name: str) -> None:
        self.client = self

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    def start_down(self, request):
        FakeRemote.steps.append("the controller tears the cluster down")
        return "job"

    def follow_job(self, job, on_event, after_event=0):
        return job

    def last_event_id_before(self, job) -> int:
        return 0


@pytest.mark.parametrize("fetch_fails", [False, True])
def test_down_keeps_the_history_after_the_teardown_and_before_the_controller_vm_goes(monkeypatch, tmp_path,
                                                                                      fetch_fails):
    data = history_bundle.bundle(controller_records(tmp_path), CLUSTER)
    FakeRemote.steps = []
    said: list[tuple[str, str]] = []
    monkeypatch.setattr(remote, "RemoteCluster", FakeRemote)
    monkeypatch.setattr(remote, "say_here", lambda name, on_event: lambda kind, message: said.append((kind, message)))
    monkeypatch.setattr("podmanager.client.pinned.load", lambda name: "credentials")

    def fetch(credentials):
        assert credentials == "credentials"
        FakeRemote.steps.append("history fetched")
        if fetch_fails:
            raise OSError("connection reset")
        return data

    monkeypatch.setattr(kept_history, "fetch", fetch)
    monkeypatch.setattr(controller_machine.ControllerMachine, "tear_down",
                        lambda self, *, timeout_s: FakeRemote.steps.append("controller VM deleted"))
    spec = parse_spec({"name": CLUSTER, "backend": "simulated", "controller": {"local": False},
                       "slices": [{"accelerator": "v4-8"}]}, dry_run=True)
    remote.down_remote(CLUSTER, spec=spec, timeout_s=5)
    assert FakeRemote.steps == ["the controller tears the cluster down", "history fetched", "controller VM deleted"]
    if fetch_fails:
        assert kept_history.kept(CLUSTER) is None
        assert [k for k, m in said if "could not be kept" in m and "connection reset" in m] == [EventKind.WARNING]
    else:
        assert kept_history.kept(CLUSTER) is not None
        assert [k for k, _ in said] == [EventKind.HISTORY_KEPT]
