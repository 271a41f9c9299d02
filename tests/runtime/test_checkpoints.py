"""`runtime.Checkpointer` on gs:// end to end, against a local GCS emulator on 127.0.0.1.

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
import urllib.request
from collections.abc import Iterator

import pytest

emulator_server = pytest.importorskip(
    "gcp_storage_emulator.server", reason="the GCS emulator is in the test extra: pip install -e '.[test]'")

pytestmark = pytest.mark.processes  # starts JAX processes

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
    """The emulator's http://127.0.0.1:PORT, serving one empty in-memory bucket."""
    server = emulator_server.create_server("127.0.0.1", 0, in_memory=True, default_bucket=BUCKET)
    server.start()
    try:
        # create_server binds port 0 to a free port but does not report it; its HTTP server knows.
        yield f"http://127.0.0.1:{server._api._httpd.server_port}"
    finally:
        server.stop()


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


def test_a_checkpoint_saved_to_gs_is_restored_from_the_bucket_by_another_process(gcs: str, tmp_path) -> None:
    url = f"gs://{BUCKET}/prefix/c/train"

    assert run_checkpointer(gcs, url, "save", str(tmp_path)) == {"directory": url, "saved": True}

    stored = objects(gcs)
    assert "prefix/c/train/7/commit_success.txt" in stored  # orbax's commit marker on GCS, through gcsfs
    assert any(name.startswith("prefix/c/train/7/") and name.endswith("manifest.ocdbt") for name in stored), stored
    assert os.listdir(tmp_path) == []  # nothing went to a local "gs:" folder

    restored = run_checkpointer(gcs, url, "restore", str(tmp_path))
    assert restored == {"directory": url, "step": 7, "w": [float(i) for i in range(8)], "b": [[2.5] * 3] * 2}
