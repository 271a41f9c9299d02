"""What `podmanager demo` says at its end, checked without running a demo: every command it
suggests works then, after the demo has removed its cluster."""

from __future__ import annotations

from cli_commands import refusal, suggested_commands
from typer.testing import CliRunner

from podmanager.api import demo
from podmanager.cli import app
from podmanager.core.run_results import AttemptResult, HostResult, RunResult


def test_the_demos_end_suggests_no_command_that_fails_once_its_cluster_is_gone(monkeypatch):
    host = HostResult(slice=0, worker_id=0, exit_code=0)
    ended = RunResult(run_id="train_mlp-1", cluster=demo.DEMO_NAME, status="succeeded", message="run succeeded",
                      hosts=[host], attempts=1,
                      attempt_log=[AttemptResult(attempt=0, status="succeeded", started=0.0, ended=1.0, hosts=[host])])
    # The demo as it ends: its cluster, controller VM and pointer removed; its run's result in hand.
    monkeypatch.setattr(demo, "run_demo", lambda **_: ended)
    shown = CliRunner().invoke(app, ["demo"], prog_name="podmanager")
    assert shown.exit_code == 0, shown.output
    for command in suggested_commands(shown.output):
        assert refusal(command) is None, command
        tried = CliRunner().invoke(app, command.split()[1:], prog_name="podmanager")
        assert tried.exit_code == 0, f"{command}: {tried.output}"
    assert "the output above is worker 0's" in shown.output  # what it says instead
