"""`podmanager timeline RUN --html FILE`: a run's timeline as one standalone HTML file."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from podmanager import api
from podmanager.cli.options import CLUSTER_OPTION
from podmanager.cli.render import console


def timeline(
    run_id: str = typer.Argument(..., metavar="RUN", help="The run's id ('podmanager runs' lists them)."),
    html: Path = typer.Option(..., "--html", metavar="FILE", help="The HTML file to write (replaced if there)."),
    cluster: Optional[str] = CLUSTER_OPTION,
) -> None:
    """Write a run's timeline (attempts, incidents, where the time went) as one HTML file that opens with no network."""
    name = cluster or api.resolve_cluster(None).name
    written = api.write_timeline_html(name, run_id, html)
    console.print(f"the timeline of run {run_id} of {name}: {written}", markup=False)
