"""`down` of a cluster whose controller VM cannot be reached (stopped, suspended, or out of
reach): the slices are deleted first, so they stop billing whatever befalls the VM's delete, and
once more after it (a controller only out of reach may have made one again). No cloud: the
steps are recorded."""

from __future__ import annotations

import pytest

from podmanager.channel.errors import ChannelError
from podmanager.client import controller_machine, remote
from podmanager.cloud.errors import CloudError
from podmanager.cluster import teardown
from podmanager.core.spec import parse_spec


class Unreachable:
    def __init__(self, name: str) -> None:
        raise ChannelError("connection refused")


def test_the_slices_go_first_even_when_the_vms_delete_fails(monkeypatch) -> None:
    steps: list[str] = []
    monkeypatch.setattr(remote, "RemoteCluster", Unreachable)
    monkeypatch.setattr(teardown, "down_by_label", lambda name, **options: steps.append(f"slices of {name}"))

    def failing_delete(self, *, timeout_s: float) -> None:
        steps.append("controller VM")
        raise CloudError("the controller VM's delete failed")

    monkeypatch.setattr(controller_machine.ControllerMachine, "tear_down", failing_delete)
    spec = parse_spec({"name": "far", "backend": "simulated", "controller": {"local": False},
                       "slices": [{"accelerator": "v4-8"}]}, dry_run=True)
    with pytest.raises(CloudError, match="delete failed"):
        remote.down_remote("far", spec=spec, timeout_s=5)
    assert steps == ["slices of far", "controller VM"]
