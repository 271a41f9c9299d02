"""Every request of a dry run keeps to Google's API definitions: `up`, `run` and `down` of a
one-slice cluster from the command line, in a folder outside the repository, the project's
emulator (a background process) checking its answers too (the tests' strict mode) and keeping
a record of each request it checked. None was refused, no answer broke a schema, and the
record holds the calls a dry run makes of each API (so the check saw them: Cloud TPU and its
operations and guest attributes, Secret Manager from `up` and from the booting VM, Cloud
Storage's bucket preflight, Compute Engine's preflight and firewall rule)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from sim_view import sim_nodes

from podmanager.emulator.schema_gate import LOG_ENV, STRICT_ENV

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]
PODMANAGER = str(Path(sys.executable).parent / "podmanager")

# What a dry run's up, run and down always ask of each API (a subset: polls vary in number).
EXPECTED = {
    "tpu.projects.locations.nodes.create", "tpu.projects.locations.nodes.list", "tpu.projects.locations.nodes.delete",
    "tpu.projects.locations.operations.get", "tpu.projects.locations.nodes.getGuestAttributes",
    "secretmanager.projects.secrets.create", "secretmanager.projects.secrets.addVersion",
    "secretmanager.projects.secrets.setIamPolicy", "secretmanager.projects.secrets.versions.access",
    "storage.buckets.get", "storage.buckets.getIamPolicy",
    "compute.networks.get", "compute.firewalls.insert", "compute.firewalls.delete",
}


def cli(folder: Path, *args: str, timeout: float = 240) -> str:
    done = subprocess.run([PODMANAGER, *args], cwd=folder, text=True, capture_output=True, timeout=timeout)
    assert done.returncode == 0, f"podmanager {' '.join(args)}: exit {done.returncode}\n{done.stderr[-3000:]}"
    return done.stdout


def test_a_dry_runs_requests_and_answers_all_keep_to_googles_api_definitions(tmp_path, monkeypatch) -> None:
    record = tmp_path / "schema-record.jsonl"
    monkeypatch.setenv(LOG_ENV, str(record))  # the emulator `up` starts inherits it, and the strict switch
    assert os.environ.get(STRICT_ENV) == "1"  # set by the tests' conftest
    folder = tmp_path / "user"
    folder.mkdir()
    (folder / "cluster.yaml").write_text(yaml.safe_dump({
        "name": "schema", "backend": "simulated", "simulation": {"create_latency_s": 0.0, "delete_latency_s": 0.0},
        "slices": [{"accelerator": "v4-8"}]}))
    (folder / "hello.py").write_text("import jax\nprint('HELLO', jax.device_count())\n")
    try:
        cli(folder, "up", "-f", "cluster.yaml", "--dry-run")
        assert "HELLO 4" in cli(folder, "run", "-c", "schema", "hello.py")
    finally:
        cli(folder, "down", "-c", "schema")
    assert not [n for n in sim_nodes() if n.cluster == "schema"]

    lines = [json.loads(line) for line in record.read_text().splitlines()]
    refused = [line for line in lines if line["refused"]]
    broken = [line for line in lines if line["answer"]]
    assert refused == [] and broken == [], (refused + broken)[:5]
    assert EXPECTED <= {line["method"] for line in lines}, EXPECTED - {line["method"] for line in lines}
    costs = sorted(line["check_us"] for line in lines)
    print(f"{len(lines)} requests checked; check CPU time per request: median {costs[len(costs) // 2]} us, "
          f"95th percentile {costs[int(len(costs) * 0.95)]} us, max {costs[-1]} us")
