"""`podmanager logs`: the output of a run, every host's lines prefixed with its name."""

from __future__ import annotations

import sys
from typing import Optional

import typer

from podmanager import api
from podmanager.cli.options import CLUSTER_OPTION


def logs(
    cluster: Optional[str] = CLUSTER_OPTION,
    run_id: Optional[str] = typer.Option(None, "--run", metavar="RUN_ID", help="Run id (default: the latest)."),
    host: Optional[str] = typer.Option(None, "--host", metavar="HOST", help="Only this host: SLICE/WORKER, e.g. 0/1 or slice-0/1."),
    follow: bool = typer.Option(False, "--follow", "-F", help="Keep printing until the run ends."),
) -> None:
    """Show the output of a run, every host's lines prefixed with its name."""
    name = cluster or api.resolve_cluster(None).name
    if run_id is None:  # say which: the latest may be an earlier run than the one in mind
        run_id = api.latest_run_id(name)
        sys.stderr.write(f"podmanager: output of run {run_id} (the latest; --run RUN_ID for another)\n")
    for where, line in api.run_log_lines(name, run_id, host, follow=follow):
        sys.stdout.write(f"[{where}] {line}\n")
        if follow:
            sys.stdout.flush()
