"""`podmanager events`: the cluster's event log."""

from __future__ import annotations

from typing import Optional

from podmanager import api
from podmanager.cli.options import CLUSTER_OPTION, JSON_OPTION
from podmanager.cli.render import print_event, print_json


def events(cluster: Optional[str] = CLUSTER_OPTION, as_json: bool = JSON_OPTION) -> None:
    """The cluster's event log: slices created, ready, preempted, deleted; zone fallbacks; retries."""
    name = cluster or api.resolve_cluster(None).name
    items = api.cluster_events(name)
    if as_json:
        print_json([e.as_dict() for e in items])
        return
    for event in items:
        print_event(event)
