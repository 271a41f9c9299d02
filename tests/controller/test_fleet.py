"""controller/fleet.py: the agents' names, and a failed probe told apart as unreachable, dead,
unresponsive or still joining."""

from __future__ import annotations

import json

from podmanager.controller import fleet


def test_agent_names():
    assert fleet.agent_name("demo", 1, 0) == "pm-demo-1-0"


def test_probe_failures_tell_unreachable_from_dead():
    from ray.exceptions import ActorDiedError, ActorUnavailableError, GetTimeoutError

    unavailable = ActorUnavailableError("node not answering", None)
    assert fleet.classify_failure(unavailable, joined=True, node_dead=False)[0] == fleet.UNREACHABLE
    assert fleet.classify_failure(unavailable, joined=True, node_dead=True)[0] == fleet.DEAD
    assert fleet.classify_failure(ActorDiedError(), joined=True, node_dead=False)[0] == fleet.DEAD
    assert fleet.classify_failure(GetTimeoutError(), joined=True, node_dead=False)[0] == fleet.UNRESPONSIVE
    assert fleet.classify_failure(GetTimeoutError(), joined=False, node_dead=False)[0] == fleet.JOINING
    assert fleet.classify_failure(None, joined=True, node_dead=True)[0] == fleet.DEAD


def test_the_agents_registry_is_typed_and_reads_the_previous_versions_file(home):
    from podmanager.core import paths
    from podmanager.vm.agent import AgentIdentity

    old = {"pm-c-0-0": {"cluster": "c", "slice_index": 0, "node_name": "c-s0", "worker_id": 0, "chips": 4,
                        "simulated": True}}
    registry_file = paths.cluster_dir("c") / fleet.REGISTRY_FILE
    registry_file.parent.mkdir(parents=True, exist_ok=True)
    registry_file.write_text(json.dumps(old))
    known = fleet.registry("c")
    assert known == {"pm-c-0-0": AgentIdentity(cluster="c", slice_index=0, node_name="c-s0", worker_id=0, chips=4,
                                               simulated=True)}
    fleet._save_registry("c", known)
    assert json.loads(registry_file.read_text()) == old  # the same file, field for field
    registry_file.write_text('{"pm-c-0-0": {"cluster": "c"}}')  # another version's, or cut short
    assert fleet.registry("c") == {}
