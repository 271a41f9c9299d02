"""runtime/checkpoints.py: `runtime.Checkpointer` on a local folder (below), and on gs:// end to end, against a
local GCS emulator on 127.0.0.1.

orbax writes a checkpoint through two clients, and both are pointed at the emulator:
its directories, metadata and commit markers go through etils epath -> fsspec's gcsfs
(`STORAGE_EMULATOR_HOST`), its array data through tensorstore's `gcs` kvstore
(`TENSORSTORE_GCS_HTTP_URL`, with `GOOGLE_AUTH_TOKEN_FOR_TESTING` standing in for
credentials). Each step runs in its own process: tensorstore reads its endpoint once per
process, and a fresh process proves the restore comes from the bucket, not from memory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest
from local_gcs import local_gcs

from podmanager import runtime

BUCKET = "ckpt-bucket"

PROGRAM = r"""
import json, sys
import jax, jax.numpy as jnp
from podmanager import runtime

url, mode = sys.argv[1], sys.argv[2]
state = {"w": jnp.arange(8.0), "b": jnp.full((2, 3), 2.5)}
with runtime.Checkpointer(url) as checkpointer:
    if mode == "save":
        saved = checkpointer.save(7, state, force=True)
        print(json.dumps({"directory": checkpointer.directory, "saved": saved}))
    else:
        step, restored = checkpointer.restore_latest(jax.tree.map(jnp.zeros_like, state))
        print(json.dumps({"directory": checkpointer.directory, "step": step,
                          "w": restored["w"].tolist(), "b": restored["b"].tolist()}))
"""


@pytest.fixture
def gcs() -> Iterator[str]:
    with local_gcs(BUCKET) as endpoint:
        yield endpoint


def run_checkpointer(endpoint: str, url: str, mode: str, cwd: str) -> dict[str, object]:
    env = {
        **os.environ,
        "STORAGE_EMULATOR_HOST": endpoint,  # gcsfs
        "TENSORSTORE_GCS_HTTP_URL": endpoint,  # tensorstore
        "GOOGLE_AUTH_TOKEN_FOR_TESTING": "emulator",  # tensorstore: this bearer token, no credential lookup
        "FSSPEC_GS_TOKEN": "anon",  # gcsfs: no credentials (a developer's own must not matter)
        # gcsfs's newer file system first asks the Storage Control gRPC API for the bucket's
        # layout, which no emulator serves (with anon it retries until the timeout): turn it off.
        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
        "JAX_PLATFORMS": "cpu",
    }
    done = subprocess.run([sys.executable, "-c", PROGRAM, url, mode], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def objects(endpoint: str) -> list[str]:
    with urllib.request.urlopen(f"{endpoint}/storage/v1/b/{BUCKET}/o", timeout=10) as answer:
        return sorted(item["name"] for item in json.load(answer).get("items", []))


@pytest.mark.processes  # starts JAX processes
def test_a_checkpoint_saved_to_gs_is_restored_from_the_bucket_by_another_process(gcs: str, tmp_path) -> None:
    url = f"gs://{BUCKET}/prefix/c/train"

    assert run_checkpointer(gcs, url, "save", str(tmp_path)) == {"directory": url, "saved": True}

    stored = objects(gcs)
    assert "prefix/c/train/7/commit_success.txt" in stored  # orbax's commit marker on GCS, through gcsfs
    assert any(name.startswith("prefix/c/train/7/") and name.endswith("manifest.ocdbt") for name in stored), stored
    assert os.listdir(tmp_path) == []  # nothing went to a local "gs:" folder

    restored = run_checkpointer(gcs, url, "restore", str(tmp_path))
    assert restored == {"directory": url, "step": 7, "w": [float(i) for i in range(8)], "b": [[2.5] * 3] * 2}


# ------------------------------------------------------------ on a local folder


def _tree(v: float):
    import jax.numpy as jnp

    return {"w": jnp.full((3, 2), v, jnp.float32), "n": {"count": jnp.asarray(int(v), jnp.int32)}}


def _value(tree) -> float:
    return float(tree["w"][0, 0])


@pytest.mark.usefixtures("clean_runtime")  # tests/runtime/conftest.py
def test_checkpointer_saves_every_n_and_restores_latest(tmp_path):
    with runtime.Checkpointer(tmp_path / "ck", every_n_steps=5) as ck:
        assert ck.latest_step() is None
        assert ck.restore_latest(_tree(0)) is None
        saved = {s: ck.save(s, _tree(s)) for s in range(1, 12)}
        assert [s for s, ok in saved.items() if ok] == [5, 10]
        assert ck.save(11, _tree(11), force=True)
        assert not ck.save(11, _tree(99), force=True)  # already there: not rewritten
        assert ck.latest_step() == 11
        assert ck.all_steps() == [5, 10, 11]
    # A fresh Checkpointer (a restarted process) sees the same thing.
    with runtime.Checkpointer(tmp_path / "ck", every_n_steps=5) as ck:
        step, tree = ck.restore_latest(_tree(0))
    assert step == 11 and _value(tree) == 11.0 and int(tree["n"]["count"]) == 11
    assert tree["w"].shape == (3, 2) and str(tree["w"].dtype) == "float32"


@pytest.mark.usefixtures("clean_runtime")  # tests/runtime/conftest.py
def test_a_saved_checkpoint_rides_on_the_progress_lines_without_counting_a_step(tmp_path, monkeypatch):
    from podmanager.runtime.contract import ProgressRecord

    path = tmp_path / "progress.jsonl"
    monkeypatch.setenv("PODMANAGER_PROGRESS_FILE", str(path))
    with runtime.Checkpointer(tmp_path / "ck", every_n_steps=5) as ck:
        for step in range(1, 7):
            runtime.report_progress(step, loss=1.0 / step)
            saving = time.time()
            if ck.save(step, _tree(step)):
                before, after = saving, time.time()
    records = [ProgressRecord.from_line(line) for line in path.read_text().splitlines()]
    # step 5's line again, the same step and time, now saying checkpoint 5 is final; then step 6 carries it
    assert [(r.step, r.checkpoint_step) for r in records] == [(1, None), (2, None), (3, None), (4, None),
                                                              (5, None), (5, 5), (6, 5)]
    assert records[5].time == records[4].time and records[5].loss == records[4].loss
    assert before <= records[5].checkpoint_time <= after and records[6].checkpoint_time == records[5].checkpoint_time


@pytest.mark.usefixtures("clean_runtime")  # tests/runtime/conftest.py
def test_checkpointer_keeps_max_to_keep(tmp_path):
    with runtime.Checkpointer(tmp_path, every_n_steps=1, max_to_keep=2) as ck:
        for s in range(1, 5):
            ck.save(s, _tree(s))
        assert ck.all_steps() == [3, 4]


@pytest.mark.usefixtures("clean_runtime")  # tests/runtime/conftest.py
def test_checkpointer_defaults_to_env_dir_and_is_disabled_without_one(tmp_path, monkeypatch):
    off = runtime.Checkpointer(every_n_steps=1)
    assert not off.enabled and not off.save(1, _tree(1), force=True) and off.latest_step() is None
    monkeypatch.setenv("PODMANAGER_CHECKPOINT_DIR", str(tmp_path / "envck"))
    with runtime.Checkpointer(every_n_steps=0) as ck:
        assert ck.enabled and ck.directory == str(tmp_path / "envck")
        assert not ck.save(3, _tree(3))  # periodic saving off
        assert ck.save(3, _tree(3), force=True)
    assert (tmp_path / "envck" / "3").is_dir()


@pytest.mark.usefixtures("clean_runtime")  # tests/runtime/conftest.py
def test_incomplete_checkpoint_is_invisible(tmp_path):
    from orbax.checkpoint._src.path import atomicity

    with runtime.Checkpointer(tmp_path, every_n_steps=5) as ck:
        ck.save(5, _tree(5))
        # Crash after the data is written but before orbax's atomic rename.
        orig = atomicity.AtomicRenameTemporaryPath.finalize

        def crash(self, *a, **k):
            raise RuntimeError("simulated crash before finalize")

        atomicity.AtomicRenameTemporaryPath.finalize = crash
        try:
            with pytest.raises(RuntimeError, match="simulated crash"):
                ck.save(10, _tree(10))
        finally:
            atomicity.AtomicRenameTemporaryPath.finalize = orig
        leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith("10")]
        assert leftovers and all(name != "10" for name in leftovers)  # only a temp dir
        assert ck.latest_step() == 5
    with runtime.Checkpointer(tmp_path, every_n_steps=5) as ck:
        assert ck.all_steps() == [5]
        step, tree = ck.restore_latest(_tree(0))
        assert (step, _value(tree)) == (5, 5.0)
        assert ck.save(10, _tree(10))  # the step can be written again
        assert ck.restore_latest(_tree(0))[0] == 10
