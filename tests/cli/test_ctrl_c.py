"""Ctrl-C in the CLI: caught by the console script's entry point from its first moment, and a
verb it interrupts stops quietly, exit 130, no traceback."""

from __future__ import annotations

import subprocess
import sys

from typer.testing import CliRunner

import podmanager.api
from podmanager.cli import app


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


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

    root = Path(__file__).resolve().parents[2]
    assert 'podmanager = "podmanager.__main__:main"' in (root / "pyproject.toml").read_text()


def test_ctrl_c_in_a_verb_other_than_up_stops_it_quietly(monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(podmanager.api, "run_history", interrupted)
    result = invoke("runs", "-c", "c")
    assert result.exit_code == 130
    assert result.output.strip() == "error: interrupted"  # no traceback, no talk of resuming or 'down'
