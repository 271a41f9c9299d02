"""`podmanager attach`: a SIGTERM to the follower ends it quietly, and the run goes on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from podmanager.core.clock import poll_until
from podmanager.core.spec import parse_spec
from podmanager.core.workload import Workload
from podmanager.state import StateStore
from podmanager.state.run_records import RunRecord, RunStore

PROGRAM = Workload(command=["true"])  # a record names what its run runs

SPEC = {"name": "c", "backend": "simulated", "slices": [{"accelerator": "v4-8"}]}


def test_sigterm_to_a_follower_leaves_quietly_and_the_run_goes_on():
    RunStore().create(RunRecord("r", "c", PROGRAM, [0], {}, None, status="running"))
    StateStore().save_cluster("c", parse_spec(SPEC), "up")
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
