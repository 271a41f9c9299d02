"""`podmanager ray-env`: the exports that point Ray's own tools at a cluster."""

from __future__ import annotations

import shlex
from typing import Optional

import typer

from podmanager import api
from podmanager.cli.options import CLUSTER_OPTION, JSON_OPTION
from podmanager.cli.render import print_json


def ray_env(cluster: Optional[str] = CLUSTER_OPTION, as_json: bool = JSON_OPTION) -> None:
    """Print the exports that point Ray's own tools at the cluster's head.

    After eval "$(podmanager ray-env -c NAME)", `ray status`, `ray job submit` and `ray.init()` reach the cluster with its token.
    """  # noqa: E501 - typer keeps line breaks inside later paragraphs
    target = api.resolve_cluster(cluster)
    access = target.ray_access(required=True)
    assert access is not None  # required: else its error
    if as_json:
        print_json(access.env)
        return
    for name, value in access.env.items():
        typer.echo(f"export {name}={shlex.quote(value)}")
