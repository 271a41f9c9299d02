"""workloads/predict.py: batch prediction that resumes at shard granularity.

In-process (CPU JAX, no Ray): the split of shards over processes, an interrupted run
finished by a rerun gives byte for byte the outputs of an uninterrupted one with each
shard written once, and a write killed before its rename leaves nothing behind after
the rerun; shards on gs:// against a local Cloud Storage emulator. A run preempted on a
dry-run cluster: tests/end_to_end/test_inference.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from podmanager import runtime
from workloads import predict

REPO = Path(__file__).resolve().parents[2]
SHARDS, ROWS, SEED = 7, 40, 3


@pytest.fixture(autouse=True)
def _fresh_flag(monkeypatch):
    """No preemption flag or progress file carried in or out of a test."""
    monkeypatch.delenv("PODMANAGER_PROGRESS_FILE", raising=False)
    runtime._reset_for_tests()
    yield
    runtime._reset_for_tests()


@pytest.fixture(scope="module")
def model():
    # Batches smaller than a shard, so a shard takes several forward passes and one is padded.
    return predict.make_model(SEED, features=32, classes=10, batch_rows=16)


@pytest.fixture
def inputs(tmp_path) -> predict.Folder:
    folder = predict.Folder(tmp_path / "in")
    predict.make_inputs(folder, SHARDS, rows=ROWS, features=32, seed=SEED)
    return folder


class CountedWrites:
    """Counts each shard's writes through `Folder.write`; optionally asks for a preemption
    (as the SIGTERM handler would) once `preempt_after` shards are written."""

    def __init__(self, monkeypatch, preempt_after: int | None = None):
        self.count: Counter[str] = Counter()
        self.preempt_after = preempt_after
        original = predict.Folder.write

        def write(folder, name, array, process_index=0):
            original(folder, name, array, process_index)
            self.count[name] += 1
            if self.preempt_after is not None and sum(self.count.values()) == self.preempt_after:
                runtime.request_preemption()

        monkeypatch.setattr(predict.Folder, "write", write)


def shard_bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_each_shard_has_exactly_one_owner_and_the_split_is_stable():
    names = [f"s{i}" for i in range(10)]
    for count in (1, 3, 4, 12):
        owned = [predict.assigned(names, i, count) for i in range(count)]
        assert sorted(n for part in owned for n in part) == names  # all shards, none twice
        assert owned == [predict.assigned(list(reversed(names)), i, count) for i in range(count)]
    assert predict.assigned(names, 1, 4) == ["s1", "s5", "s9"]
    with pytest.raises(ValueError):
        predict.assigned(names, 4, 4)


def test_synthetic_inputs_are_a_function_of_seed_and_index(tmp_path):
    first, second = predict.Folder(tmp_path / "a"), predict.Folder(tmp_path / "b")
    names = predict.make_inputs(first, 4, rows=5, features=3, seed=1)
    # Two processes writing their halves make the same set as one process writing all.
    for index in (1, 0):
        assert predict.make_inputs(second, 4, rows=5, features=3, seed=1, process_index=index,
                                   process_count=2) == names
    assert first.names() == names == ["shard-00000", "shard-00001", "shard-00002", "shard-00003"]
    assert shard_bytes(first.path) == shard_bytes(second.path)


def test_an_interrupted_run_resumes_to_the_same_bytes_writing_each_shard_once(tmp_path, inputs, model, monkeypatch):
    names = inputs.names()
    reference = predict.Folder(tmp_path / "reference")
    assert predict.predict_shards(names, inputs, reference, model, log=lambda _: None) == runtime.EXIT_OK

    writes = CountedWrites(monkeypatch, preempt_after=3)
    out = predict.Folder(tmp_path / "out")
    assert predict.predict_shards(names, inputs, out, model, log=lambda _: None) == runtime.EXIT_PREEMPTED
    assert sorted(writes.count) == names[:3]  # the shard in flight was finished, no other started
    first_inodes = {p.name: p.stat().st_ino for p in out.path.iterdir()}

    runtime._reset_for_tests()  # the relaunched process starts without the notice
    lines: list[str] = []
    assert predict.predict_shards(names, inputs, out, model, log=lines.append) == runtime.EXIT_OK
    assert "3 already done, 4 to do" in lines[0]
    assert writes.count == Counter({name: 1 for name in names})
    assert {name: out.path.joinpath(name).stat().st_ino for name in first_inodes} == first_inodes  # not rewritten
    assert shard_bytes(out.path) == shard_bytes(reference.path)  # byte for byte, nothing else in the folder
    assert len(shard_bytes(out.path)) == SHARDS
    # What a shard holds: the teacher's logits of its rows.
    w1, w2 = predict.teacher_weights(SEED, 32, 10)
    rows = inputs.read(names[0])
    assert predict.Folder(out.path).read(names[0]) == pytest.approx(np.tanh(rows @ w1) @ w2, abs=1e-5)


def test_processes_split_the_work_and_a_rerun_after_all_is_done_writes_nothing(tmp_path, inputs, model, monkeypatch):
    names = inputs.names()
    whole = predict.Folder(tmp_path / "whole")
    predict.predict_shards(names, inputs, whole, model, log=lambda _: None)
    writes = CountedWrites(monkeypatch)
    split = predict.Folder(tmp_path / "split")
    for index in range(3):  # three processes, one after the other
        assert predict.predict_shards(names, inputs, split, model, process_index=index, process_count=3,
                                      log=lambda _: None) == runtime.EXIT_OK
        assert sorted(writes.count) == sorted(n for i in range(index + 1) for n in predict.assigned(names, i, 3))
    assert shard_bytes(split.path) == shard_bytes(whole.path)
    assert predict.predict_shards(names, inputs, split, model, log=lambda _: None) == runtime.EXIT_OK
    assert sum(writes.count.values()) == SHARDS


def test_a_write_killed_before_its_rename_is_cleaned_up_by_its_owner(tmp_path, inputs, model):
    names = inputs.names()
    out = predict.Folder(tmp_path / "out")
    out.create()
    # Left by a process killed mid-write: one of each owner's shards.
    (out.path / f".{names[0]}.npy.tmp-0-4242").write_bytes(b"partial")
    (out.path / f".{names[1]}.npy.tmp-1-4343").write_bytes(b"partial")
    lines: list[str] = []
    predict.predict_shards(names, inputs, out, model, process_index=0, process_count=2, log=lines.append)
    assert "1 unfinished write(s) removed" in lines[0]
    assert (out.path / f".{names[1]}.npy.tmp-1-4343").exists()  # process 1's to remove, not process 0's
    assert out.names() == predict.assigned(names, 0, 2)
    predict.predict_shards(names, inputs, out, model, process_index=1, process_count=2, log=lambda _: None)
    assert sorted(p.name for p in out.path.iterdir()) == [f"{name}.npy" for name in names]


def test_progress_counts_the_shards_done_by_this_process(tmp_path, inputs, model, monkeypatch):
    progress = tmp_path / "progress.jsonl"
    monkeypatch.setenv("PODMANAGER_PROGRESS_FILE", str(progress))
    names = inputs.names()
    out = predict.Folder(tmp_path / "out")
    out.create()
    out.write(names[0], model(inputs.read(names[0])))  # done by an earlier attempt
    predict.predict_shards(names, inputs, out, model, process_index=0, process_count=2, log=lambda _: None)
    records = [json.loads(line) for line in progress.read_text().splitlines()]
    assert [(r["step"], r["shards"]) for r in records] == [(2, 4.0), (3, 4.0), (4, 4.0)]


GCS_PROGRAM = r"""
import sys
import numpy as np
from podmanager import runtime
from workloads import predict

inputs, outputs = predict.Folder(sys.argv[1] + "/in"), predict.Folder(sys.argv[1] + "/out")
names = predict.make_inputs(inputs, 3, rows=4, features=2, seed=0)
model = lambda rows: rows * np.float32(2)
written = []
original = predict.Folder.write
predict.Folder.write = lambda folder, name, array, index=0: (written.append(name), original(folder, name, array, index))
for _ in range(2):  # a run, then a rerun that finds everything done
    assert predict.predict_shards(names, inputs, outputs, model, log=lambda _: None) == runtime.EXIT_OK
assert written == names and outputs.names() == names, (written, outputs.names())  # each once
assert np.array_equal(outputs.read(names[1]), predict.synthetic_shard(0, 1, 4, 2) * 2)
print("ok")
"""


@pytest.mark.timeout(60)
def test_shards_on_gs_are_written_whole_in_one_upload_and_skipped_when_there(tmp_path):
    """Against a local GCS emulator (in the test extra), through etils epath and gcsfs, in a
    fresh process (gcsfs reads its endpoint when it starts); no JAX: the model is numpy."""
    server_module = pytest.importorskip("gcp_storage_emulator.server", reason="the GCS emulator is in the test extra")
    server = server_module.create_server("127.0.0.1", 0, in_memory=True, default_bucket="predict-bucket")
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{server._api._httpd.server_port}"
        env = {**os.environ, "STORAGE_EMULATOR_HOST": endpoint, "FSSPEC_GS_TOKEN": "anon",
               "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false", "PYTHONPATH": str(REPO)}
        env.pop("PODMANAGER_PROGRESS_FILE", None)
        done = subprocess.run([sys.executable, "-c", GCS_PROGRAM, "gs://predict-bucket/job"], env=env,
                              cwd=tmp_path, capture_output=True, text=True, timeout=50)
        assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr[-3000:]
        with urllib.request.urlopen(f"{endpoint}/storage/v1/b/predict-bucket/o", timeout=10) as answer:
            stored = sorted(item["name"] for item in json.load(answer).get("items", []))
        assert [name for name in stored if name.startswith("job/out/")] == [
            f"job/out/shard-0000{i}.npy" for i in range(3)]  # no temporary object
        assert os.listdir(tmp_path) == []  # nothing went to a local "gs:" folder
    finally:
        server.stop()
