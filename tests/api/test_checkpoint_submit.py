"""A GCP-backend cluster, up in the Cloud TPU emulator through the real client: `podmanager
run` with a local checkpoint dir on its multi-host slice is refused with exit 2 before
anything starts (no Ray connection, no run record, no call to the Cloud TPU API)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from podmanager.api.cluster import Cluster
from podmanager.cli import app
from podmanager.cloud.base import NodeState
from podmanager.cloud.gcp.client import GcpCloud
from podmanager.controller.cluster_hosts import ClusterHosts
from podmanager.core.clock import FakeClock
from podmanager.emulator.sim.cloud import SimCloud
from podmanager.emulator.tpu_api import TpuEmulator
from podmanager.provisioning.loop import Provisioner
from podmanager.provisioning.plan import desired_slices
from podmanager.state import StateStore
from podmanager.state.run_records import RunStore

# This machine as the controller (a GCP run from inside the VPC): the submit's checks run here.
SPEC = {"name": "c", "project": "my-project", "zones": ["zone-a"], "slices": [{"accelerator": "v4-16"}],
        "controller": {"local": True}}


class NoRay:
    """Stands for the Ray side: a submit that got as far as connecting is recorded here."""

    def __init__(self) -> None:
        self.connects = 0

    def connect(self) -> bool:
        self.connects += 1
        return False


@pytest.fixture
def emulator(monkeypatch) -> Iterator[TpuEmulator]:
    clock = FakeClock()
    emulator = TpuEmulator(SimCloud("my-project", clock=clock, create_latency_s=2.0))
    server, port = emulator.serve()
    monkeypatch.setenv("TPU_EMULATOR_HOST", f"127.0.0.1:{port}")
    try:
        # `up` without its Ray half: the slice created and READY through the real client.
        cluster = Cluster.from_dict(SPEC)
        with GcpCloud("my-project", emulator_host=f"127.0.0.1:{port}", clock=clock, poll_interval_s=1.0) as cloud:
            nodes = Provisioner(cloud, "c", ["zone-a"], clock=clock, poll_interval_s=1.0).converge(
                desired_slices(cluster.spec), timeout_s=60)
        assert [(n.name, n.state, n.accelerator_type) for n in nodes] == [("c-s0", NodeState.READY, "v4-16")]
        StateStore().save_cluster("c", cluster.spec, "up")
        yield emulator
    finally:
        server.stop(grace=None).wait()


def test_a_local_checkpoint_dir_on_a_multi_host_gcp_run_is_refused_before_anything_starts(
        emulator: TpuEmulator, tmp_path, monkeypatch) -> None:
    ray = NoRay()
    monkeypatch.setattr(ClusterHosts, "connect", lambda self: ray.connect())
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('trained')\n")
    calls_before = len(emulator.requests)

    result = CliRunner().invoke(app, ["run", "-c", "c", "--checkpoint-dir", "ck", "train.py"],
                                prog_name="podmanager")

    assert result.exit_code == 2, result.output
    output = " ".join(result.output.split())  # the error is wrapped to the terminal's width
    assert f"--checkpoint-dir: {tmp_path / 'ck'} is a folder on each host's own disk, but this run spans 2 hosts" \
        in output
    assert "gs://BUCKET/PATH" in output and "checkpoints: gs://BUCKET/PREFIX" in output
    assert ray.connects == 0
    assert RunStore().list("c") == []
    assert [e.kind for e in StateStore().events("c")] == []
    assert len(emulator.requests) == calls_before  # no call to the Cloud TPU API either
    assert not (tmp_path / "ck").exists()


def test_the_same_run_with_a_bucket_gets_past_the_check(emulator: TpuEmulator, tmp_path, monkeypatch) -> None:
    """The refusal above is the checkpoint dir's, not some other check's: with gs:// the submit
    goes on to the Ray head's check (no head here, so it stops there with exit 1)."""
    ray = NoRay()
    monkeypatch.setattr(ClusterHosts, "connect", lambda self: ray.connect())
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('trained')\n")

    result = CliRunner().invoke(app, ["run", "-c", "c", "--checkpoint-dir", "gs://b/ck", "train.py"],
                                prog_name="podmanager")

    assert result.exit_code == 1, result.output
    assert "cluster c: the cluster has no Ray head" in " ".join(result.output.split())
    assert "podmanager up" in result.output
