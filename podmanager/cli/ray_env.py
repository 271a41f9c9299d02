"""`podmanager ray-env`: the exports that point Ray's own tools at a cluster."""

from __future__ import annotations

import shlex
from typing import Optional

import typer

from podmanager import api
from podmanager.cli.options import CLUSTER_OPTION, JSON_OPTION
from podmanager.cli.render import print_json
from podmanager.core.errors import PodmanagerError


def ray_env(cluster: Optional[str] = CLUSTER_OPTION, as_json: bool = JSON_OPTION) -> None:
    """Print the exports that point Ray's own tools at the cluster's head.

    After eval "$(podmanager ray-env -c NAME)", `ray status`, `ray job submit` and `ray.init()` reach the cluster with its token.
    """  # noqa: E501 - typer keeps line breaks inside later paragraphs
    target = api.resolve_cluster(cluster)
    access = target.ray_access()
    if access is None:
        if target.runtime.hosts is None:
            raise PodmanagerError(f"--cluster: {target.name} has no Ray side (its spec sets simulation.boot_hosts: false)")
        raise PodmanagerError(f"--cluster: {target.name} has no Ray head yet",
                              hint=f"Start it with 'podmanager up -f SPEC' for {target.name}.")
    if as_json:
        print_json(access.env)
        return
    for name, value in access.env.items():
        typer.echo(f"export {name}={shlex.quote(value)}")
