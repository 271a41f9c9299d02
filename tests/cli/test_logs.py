"""`podmanager logs` of a run just submitted: no error before its supervisor made its folder,
and without `--run` it names the latest run."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

from typer.testing import CliRunner

import podmanager.api
from podmanager.cli import app
from podmanager.core.workload import Workload
from podmanager.state.run_records import RunRecord, RunStore

PROGRAM = Workload(command=["true"])  # a record names what its run runs


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def test_logs_of_a_run_just_submitted_is_no_error_and_the_latest_is_named(monkeypatch):
    monkeypatch.setattr(podmanager.api, "resolve_cluster", lambda name: SimpleNamespace(name="c"))
    RunStore().create(RunRecord("older", "c", PROGRAM, [0], {}, None, status="succeeded", created_at=1.0))
    RunStore().create(RunRecord("fresh", "c", PROGRAM, [0], {}, None, status="starting", created_at=2.0))
    assert invoke("logs", "-c", "c", "--run", "fresh").exit_code == 0  # its supervisor has made no folder yet
    latest = subprocess.run([sys.executable, "-m", "podmanager", "logs", "-c", "c"], capture_output=True, text=True,
                            timeout=60)
    assert latest.returncode == 0 and "output of run fresh" in latest.stderr
