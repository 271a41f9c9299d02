"""`podmanager dashboard`: the page of a cluster whose controller is this machine, served on
127.0.0.1 until Ctrl-C (also for a cluster known only by its records, as after `down`); bad
flags and unknown clusters exit 2 and open nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request

from dashboard_records import CLUSTER, preempted_run
from typer.testing import CliRunner

from podmanager.cli import app


def test_the_page_is_served_until_ctrl_c():
    preempted_run()
    command = subprocess.Popen([sys.executable, "-m", "podmanager", "dashboard", "-c", CLUSTER, "--no-browser"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        first = command.stdout.readline()
        assert first.startswith(f"podmanager's page of {CLUSTER}: http://127.0.0.1:"), first
        url = first.rsplit(" ", 1)[-1].strip()
        with urllib.request.urlopen(url, timeout=30) as page:
            assert "app.js" in page.read().decode()
        with urllib.request.urlopen(f"{url}{CLUSTER}/api/runs", timeout=30) as runs:
            assert [r["run_id"] for r in json.loads(runs.read())["runs"]] == ["r1"]
        with urllib.request.urlopen(f"{url}metrics", timeout=30) as metrics:
            assert "podmanager_incidents_total" in metrics.read().decode()
    finally:
        os.killpg(command.pid, signal.SIGINT)
        out, err = command.communicate(timeout=30)
    assert command.returncode == 130, out + err


def test_bad_flags_and_unknown_clusters_exit_2():
    runner = CliRunner()
    both = runner.invoke(app, ["dashboard", "-c", CLUSTER, "--ray", "--service", "s"])
    assert both.exit_code == 2 and "--ray" in both.output
    unknown = runner.invoke(app, ["dashboard", "-c", "nope", "--no-browser"])
    assert unknown.exit_code == 2 and "no cluster named 'nope'" in unknown.output
