"""`podmanager status`: slices and hosts as the cloud and the hosts last reported them."""

from __future__ import annotations

from typing import Optional

from podmanager import api
from podmanager.cli.options import CLUSTER_OPTION, JSON_OPTION
from podmanager.cli.render import print_json, print_status


def status(cluster: Optional[str] = CLUSTER_OPTION, as_json: bool = JSON_OPTION) -> None:
    """Slices (and hosts) of a cluster as the cloud reports them (its monitor's view, a second old on a dry run)."""
    result = api.resolve_cluster(cluster).status()
    if as_json:
        print_json(result.model_dump(mode="json"))
    else:
        print_status(result)
