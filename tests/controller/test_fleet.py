"""controller/fleet.py: the agents' names, and a failed probe told apart as unreachable, dead,
unresponsive or still joining."""

from __future__ import annotations

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
