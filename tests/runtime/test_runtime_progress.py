"""runtime/progress.py: `report_progress`, one JSON line per step in the progress file."""

from __future__ import annotations

import json
import time

import pytest

from podmanager import runtime

pytestmark = pytest.mark.usefixtures("clean_runtime")  # tests/runtime/conftest.py


# ------------------------------------------------------------ progress


def test_report_progress_appends_json_lines(tmp_path, monkeypatch):
    path = tmp_path / "sub" / "progress.jsonl"
    monkeypatch.setenv("PODMANAGER_PROGRESS_FILE", str(path))
    before = time.time()
    runtime.report_progress(1, loss=2.5)
    runtime.report_progress(2, loss=1, accuracy=0.25)
    import numpy as np

    runtime.report_progress(3, loss=np.float32(0.5))
    lines = path.read_text().splitlines()
    recs = [json.loads(ln) for ln in lines]
    assert [r["step"] for r in recs] == [1, 2, 3]
    assert [r["loss"] for r in recs] == [2.5, 1.0, 0.5]
    assert recs[1]["accuracy"] == 0.25 and isinstance(recs[1]["loss"], float)
    assert all(r["process_id"] == 0 for r in recs)
    assert all(before <= r["time"] <= time.time() for r in recs)
    assert set(recs[0]) == {"step", "time", "process_id", "loss"}


def test_report_progress_uses_process_id_from_env(tmp_path, monkeypatch):
    path = tmp_path / "p.jsonl"
    monkeypatch.setenv("PODMANAGER_PROGRESS_FILE", str(path))
    monkeypatch.setenv("JAX_NUM_PROCESSES", "4")
    monkeypatch.setenv("JAX_PROCESS_ID", "3")
    monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "h:1")
    runtime.report_progress(7, loss=0.1)
    assert json.loads(path.read_text())["process_id"] == 3


def test_report_progress_is_noop_without_env(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runtime.report_progress(1, loss=1.0)
    assert list(tmp_path.iterdir()) == []
