"""`podmanager connect`: this machine's pointer to a cluster whose controller is a VM."""

from __future__ import annotations

from typing import Optional

import typer

from podmanager import api
from podmanager.cli.render import console


def connect(
    cluster: str = typer.Option(..., "--cluster", "-c", metavar="NAME", help="The cluster's name."),
    project: Optional[str] = typer.Option(None, "--project", metavar="PROJECT", help="Its Google Cloud project."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Look in the local simulated cloud."),
) -> None:
    """Reach a cluster made from another machine (or whose local pointer was lost): finds its controller VM, pins its certificate, reads the channel token from Secret Manager."""  # noqa: E501
    credentials = api.connect(cluster, project=project, dry_run=dry_run)
    console.print(f"connected to {cluster}: its controller serves at {credentials.address.host}:"
                  f"{credentials.address.port}; every verb reaches it now", markup=False)
