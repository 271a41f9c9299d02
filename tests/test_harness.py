"""The suite's own harness: what every test may rely on, however the runner was started."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRINT_SIGINT = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"


def test_a_process_a_test_starts_answers_ctrl_c():
    """A child started by a test gets SIGINT's default action (Python turns it into
    KeyboardInterrupt), as from a terminal, so a test's Ctrl-C reaches it."""
    child = subprocess.run([sys.executable, "-c", PRINT_SIGINT], capture_output=True, text=True, check=True)
    assert child.stdout.strip() == "True"


def test_so_does_one_of_a_runner_started_as_a_background_job():
    """The runner started with SIGINT ignored, as `… &` in a script starts it (and execs keep):
    the test above still passes in it."""
    background = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                  "os.execv(sys.executable, [sys.executable, '-m', 'pytest', '-q', '-n', '0', '-p', 'no:cacheprovider', "
                  "'tests/test_harness.py::test_a_process_a_test_starts_answers_ctrl_c'])")
    runner = subprocess.run([sys.executable, "-c", background], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert runner.returncode == 0, runner.stdout[-3000:] + runner.stderr[-3000:]
