"""Small defects an adversarial trial found (issue 18, items 8 and 9), each where the user
meets it, without Ray: specs and flags that were silently taken, verbs that exited 0 on a
name that does not exist, `logs` right after `run --detach`, a checkpoint folder that cannot
be one, the order of a followed run's lines, and what `up` prints for a thousand slices."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

import podmanager.api
from podmanager.api.run_handle import RunHandle
from podmanager.api.submission import run_checkpoints
from podmanager.cli import app
from podmanager.cli.up import SAME_KIND_SHOWN, EventFeed
from podmanager.core.clock import poll_until
from podmanager.core.errors import SpecError
from podmanager.core.records import HostRef
from podmanager.core.spec import parse_spec
from podmanager.core.workload import Workload
from podmanager.runtime import Checkpointer
from podmanager.state import StateStore
from podmanager.state.run_records import RunRecord, RunStore

SPEC = {"name": "c", "backend": "simulated", "slices": [{"accelerator": "v4-8"}]}


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.mark.parametrize("change, field", [({"slices": [{"accelerator": "v4-8", "count": True}]}, "count"),
                                           ({"zones": []}, "zones"),
                                           ({"zones": [], "backend": "gcp", "project": "p"}, "zones")])
def test_a_spec_value_that_only_looks_right_is_refused(change, field):
    with pytest.raises(SpecError, match=field):
        parse_spec({**SPEC, **change})


@pytest.fixture
def a_cluster(monkeypatch):
    """`run` resolves this stand-in cluster; nothing may be submitted."""
    cluster = SimpleNamespace(name="c", submit=lambda *a, **k: pytest.fail("submitted"), close=lambda: None)
    monkeypatch.setattr(podmanager.api, "resolve_cluster", lambda name: cluster)


@pytest.mark.parametrize("flags, named", [(["--max-failures", "-1"], "--max-failures"),
                                          (["--slices", ""], "--slices"),
                                          (["--env", "A B=x"], "--env")])
def test_a_run_flag_out_of_range_is_bad_input(a_cluster, flags, named):
    result = invoke("run", "-c", "c", "--detach", *flags, "train.py")
    assert result.exit_code == 2 and named in result.output


def test_events_and_runs_of_an_unknown_name_exit_2_and_of_a_torn_down_cluster_show_its_history():
    assert invoke("events", "-c", "nope").exit_code == 2
    assert invoke("runs", "-c", "nope").exit_code == 2
    store = StateStore()
    store.add_event("gone", "up", "1 slice(s) on simulated")  # the cluster record went with `down`
    RunStore().create(RunRecord("gone-run", "gone", {}, [0], {}, None, status="succeeded"))
    events = invoke("events", "-c", "gone")
    assert events.exit_code == 0 and "1 slice(s) on simulated" in events.output
    runs = invoke("runs", "-c", "gone")
    assert runs.exit_code == 0 and "gone-run" in runs.output
    status = invoke("status", "-c", "gone")
    assert status.exit_code == 2 and "torn down" in status.output


@pytest.mark.ray  # starts a podmanager process
def test_logs_of_a_run_just_submitted_is_no_error_and_the_latest_is_named(monkeypatch):
    monkeypatch.setattr(podmanager.api, "resolve_cluster", lambda name: SimpleNamespace(name="c"))
    RunStore().create(RunRecord("older", "c", {}, [0], {}, None, status="succeeded", created_at=1.0))
    RunStore().create(RunRecord("fresh", "c", {}, [0], {}, None, status="starting", created_at=2.0))
    assert invoke("logs", "-c", "c", "--run", "fresh").exit_code == 0  # its supervisor has made no folder yet
    latest = subprocess.run([sys.executable, "-m", "podmanager", "logs", "-c", "c"], capture_output=True, text=True,
                            timeout=60)
    assert latest.returncode == 0 and "output of run fresh" in latest.stderr


def test_a_checkpoint_folder_that_cannot_be_one_is_refused_at_submit_and_fails_every_process(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(SpecError, match="--checkpoint-dir: .* cannot be made"):
        run_checkpoints(parse_spec(SPEC), Workload(entrypoint="x.py", checkpoint_dir=str(blocker / "ck")))
    with pytest.raises(FileExistsError):  # in each process of the program, before orbax's barrier
        Checkpointer(str(blocker))


def test_a_followed_run_shows_an_event_before_the_output_written_after_it(tmp_path):
    runs, store = RunStore(), StateStore()
    runs.create(RunRecord("r", "c", {}, [0], {}, None, status="succeeded", result=None))
    store.add_event("c", "run_submitted", "run r submitted", run_id="r")
    store.add_event("c", "attempt_started", "attempt 0 on 1 host(s)", run_id="r")
    handle = RunHandle("c", "r", runs=runs, store=store)
    handle.folder.append(HostRef(0, 0), b"hello from the program\n")
    record = runs.get("r")
    record.result = {"run_id": "r", "cluster": "c", "status": "succeeded", "message": "", "hosts": [],
                     "metrics": {}, "attempts": 1, "attempt_log": []}
    runs.save(record)
    seen: list[str] = []
    handle.follow(lambda slot, text: seen.append(text.strip()), lambda event: seen.append(event.kind))
    assert seen.index("attempt_started") < seen.index("hello from the program")


def test_a_thousand_slices_print_a_few_lines_and_a_count():
    shown: list[str] = []
    feed = EventFeed(SimpleNamespace(update=lambda text: None), show_event=lambda e: shown.append(e.message))
    for i in range(1000):
        feed(SimpleNamespace(kind="slice_creating", message=f"creating c-s{i}"))
    feed(SimpleNamespace(kind="slices_ready", message="all READY"))
    assert shown == [f"creating c-s{i}" for i in range(SAME_KIND_SHOWN)] + ["all READY"]


@pytest.mark.ray  # starts a podmanager process
def test_sigterm_to_a_follower_leaves_quietly_and_the_run_goes_on():
    RunStore().create(RunRecord("r", "c", {}, [0], {}, None, status="running"))
    StateStore().save_cluster("c", SPEC, "simulated", "up")
    follower = subprocess.Popen([sys.executable, "-m", "podmanager", "attach", "-c", "c", "r"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        poll_until(lambda: _follows(follower.pid) or follower.poll() is not None, timeout_s=60, interval_s=0.1,
                   what="the follower's start")
        follower.send_signal(signal.SIGTERM)
        _, err = follower.communicate(timeout=30)
    finally:
        follower.kill()
    assert follower.returncode == 128 + signal.SIGTERM
    assert "what it started goes on" in err and "SIGTERM received" not in err
    assert RunStore().get("r").status == "running"


def _follows(pid: int) -> bool:
    """The follower has opened the state database: it is past start-up, in its loop."""
    try:
        return any(link.endswith("state.db") for link in
                   (os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")))
    except OSError:
        return False


def test_down_searches_a_simulated_project_whose_emulator_has_not_saved_yet(podmanager_home):
    from podmanager.cluster.teardown import simulated_projects

    (podmanager_home / "sim" / "emulators").mkdir(parents=True)
    (podmanager_home / "sim" / "saved-project.json").write_text("{}")
    (podmanager_home / "sim" / "emulators" / "serving-project.json").write_text("{}")  # serves, saved nothing yet
    (podmanager_home / "sim" / "emulators" / "serving-project.log").write_text("")
    assert simulated_projects() == ["saved-project", "serving-project"]


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
    StateStore().save_cluster("c", spec.model_dump(mode="json"), "simulated", "up")
    cancelled = invoke("cancel", "-c", "c", "nope")
    assert cancelled.exit_code == 2
    assert "cancel: no run 'nope' in cluster c" in cancelled.output and "RUN:" not in cancelled.output


def test_one_outage_of_the_api_is_one_retry_event(sim, clock):
    from podmanager.api import Cluster

    spec = {"name": "c", "backend": "simulated", "simulation": {"boot_hosts": False},
            "slices": [{"accelerator": "v4-8"}]}
    cluster = Cluster.from_dict(spec, simulator=sim, clock=clock)
    sim.inject_transient(12)  # as a dead emulator answers every call for a while
    assert cluster.up().slices[0].state == "READY"
    retries = [e.message for e in cluster.events() if e.kind == "retry"]
    assert len(retries) == 1 and "retrying until the API answers" in retries[0]
    clock.advance(120)  # a later outage is news again
    sim.inject_transient(3)
    cluster.up()
    assert [e.kind for e in cluster.events()].count("retry") == 2


def test_ctrl_c_while_the_cli_loads_exits_130_without_a_traceback(tmp_path):
    """The entry point catches Ctrl-C from its first moment: here it arrives as the CLI's modules load."""
    interrupted_import = (
        "import sys\n"
        "class CtrlC:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'podmanager.cli':\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, CtrlC())\n"
        "from podmanager.__main__ import main\n"
        "main()\n")
    done = subprocess.run([sys.executable, "-c", interrupted_import, "status"], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert done.returncode == 130
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr


def test_the_console_script_is_the_entry_point_that_catches_ctrl_c():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    assert 'podmanager = "podmanager.__main__:main"' in (root / "pyproject.toml").read_text()


def test_the_emulators_help_shows_every_fault_form_whole():
    from podmanager.core.fault_text import TEXT_FORMS

    shown = CliRunner().invoke(app, ["emulator", "-h"], terminal_width=80)
    assert shown.exit_code == 0
    for form in TEXT_FORMS.values():  # each whole, in the one list of them
        assert form in shown.output.split("Faults (--fault):")[1], form


def test_ctrl_c_in_a_verb_other_than_up_stops_it_quietly(monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(podmanager.api, "run_history", interrupted)
    result = invoke("runs", "-c", "c")
    assert result.exit_code == 130
    assert result.output.strip() == "error: interrupted"  # no traceback, no talk of resuming or 'down'


@pytest.mark.parametrize("verb", [["events"], ["logs"], ["runs"], ["status"], ["attach", "r"], ["cancel", "r"],
                                  ["ray-env"]])
def test_a_read_only_verb_on_an_unknown_cluster_makes_no_folder(verb, podmanager_home):
    result = invoke(*verb, "-c", "nope")
    assert result.exit_code == 2
    assert not (podmanager_home / "clusters" / "nope").exists()
