"""Unmodified TPU programs on simulated TPU VMs: a script whose only setup is
`jax.distributed.initialize()` forms the right global mesh on one slice and across two, each
host answers its own metadata server like a TPU VM, and a preemption notice reaches the
program through the host's metadata watch."""

from __future__ import annotations

import json
import os
import textwrap
import urllib.error
import urllib.request

import pytest
import ray
from ray_fixtures import module_cluster

from podmanager.running.logs import RunFolder
from podmanager.api import simulation
from podmanager.core.workload import Workload

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]
NAME = "plainjax"
SPEC = {
    "name": NAME,
    "backend": "simulated",
    "simulation": {"create_latency_s": 0.0, "delete_latency_s": 0.0},
    "health": {"interval_s": 0.5},
    "slices": [{"accelerator": "v4-16"}, {"accelerator": "v4-8", "count": 2}],
}
SCRIPT = textwrap.dedent('''
    import json, os, sys
    import jax
    import jax.numpy as jnp

    jax.distributed.initialize()  # nothing else: JAX finds its peers as on a TPU VM
    ones = jnp.ones(jax.local_device_count())
    summed = jax.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")(ones)
    print("RESULT " + json.dumps({"process": jax.process_index(), "processes": jax.process_count(),
                                  "devices": jax.device_count(), "psum": float(summed[0]),
                                  "slice": os.environ.get("MEGASCALE_SLICE_ID")}), flush=True)
''')


home, cluster, _shared_home = module_cluster(SPEC)


def results(cluster, run_id: str) -> list[dict]:
    found = []
    for log in sorted(RunFolder(cluster.name, run_id).folder.glob("slice-*-host-*.log")):
        found += [json.loads(line[len("RESULT "):]) for line in log.read_text().splitlines()
                  if line.startswith("RESULT ")]
    return sorted(found, key=lambda r: r["process"])


def run_plain(cluster, tmp_path, slices: list[int]):
    (tmp_path / "plain.py").write_text(SCRIPT)
    result = cluster.run(Workload(command=["python", "plain.py"], slices=slices, working_dir=str(tmp_path)))
    assert result.status == "succeeded", result.message
    return results(cluster, result.run_id)


def test_a_plain_initialize_forms_the_global_mesh_of_one_slice(cluster, tmp_path):
    seen = run_plain(cluster, tmp_path, [0])
    assert [(r["process"], r["processes"], r["devices"]) for r in seen] == [(0, 2, 8), (1, 2, 8)]
    assert {r["psum"] for r in seen} == {8.0}  # summed across every device of both hosts


def test_a_plain_initialize_forms_the_global_mesh_across_two_slices(cluster, tmp_path):
    seen = run_plain(cluster, tmp_path, [1, 2])
    assert [(r["process"], r["processes"], r["devices"], r["slice"]) for r in seen] == [
        (0, 2, 8, "0"), (1, 2, 8, "1")]  # slice-major process ids
    assert {r["psum"] for r in seen} == {8.0}


def metadata_of(cluster, slice_index: int, worker: int) -> str:
    """The GCE_METADATA_IP a simulated host's processes see."""
    agent = dict(((s.slice_index, s.worker_id), a) for s, a in cluster.runtime.agents([slice_index]))[(slice_index, worker)]

    @ray.remote(num_cpus=0)
    def environment_of_the_host() -> str:
        return os.environ.get("GCE_METADATA_IP", "")

    node = ray.get(agent.info.remote())["ray_node_id"]
    strategy = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(node, soft=False)
    return ray.get(environment_of_the_host.options(scheduling_strategy=strategy).remote())


def test_each_host_answers_its_own_metadata_like_a_tpu_vm(cluster):
    address = metadata_of(cluster, 0, 1)
    url = f"http://{address}/computeMetadata/v1/instance/attributes/agent-worker-number"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, timeout=10)
    assert refused.value.code == 403
    request = urllib.request.Request(url, headers={"Metadata-Flavor": "Google"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.read().decode() == "1"
    assert metadata_of(cluster, 0, 0) != address  # one server per VM


def test_a_preemption_notice_reaches_the_host_agents_through_their_metadata(cluster):
    agents = cluster.runtime.agents([2])
    assert ray.get([a.preemption_notice.remote() for _, a in agents]) == [None]
    simulation.preempt(cluster.runtime, 2, notice_s=120)  # the last test here: `down` takes the slice before it goes
    assert ray.get([a.preemption_notice.remote() for _, a in agents]) == ["preempted"]
    [where] = cluster.runtime.slice_locations([2])
