"""`podmanager down`: delete everything labelled with the cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from podmanager import api
from podmanager.cli.options import CLUSTER_OPTION
from podmanager.cli.render import console, errors, print_event


def down(
    cluster: Optional[str] = CLUSTER_OPTION,
    file: Optional[Path] = typer.Option(None, "--file", "-f", metavar="SPEC", help="Spec to find the cluster by (if its local state is lost)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="The cluster is on the simulated cloud."),
    project: Optional[str] = typer.Option(None, "--project", metavar="PROJECT", help="GCP project, when the local state is lost."),
    zones: Optional[list[str]] = typer.Option(None, "--zone", metavar="ZONE", help="Zone to search, when the local state is lost (repeat)."),
) -> None:
    """Delete every slice and queued resource of the cluster, found by label. Safe to repeat."""
    with console.status(f"tearing down {cluster or file or 'the cluster'} ..."):
        report = api.down(cluster, spec_file=file, dry_run=dry_run, project=project, zones=zones,
                          on_event=print_event)
    if report.store_error is not None:
        errors.print(f"warning: {report.store_error.message}; found the cluster by label and by its processes "
                     f"instead.\n{report.store_error.hint}", markup=False)
    found = report.by_label
    if found is None:
        return
    where = "project" if project and not dry_run else "simulated project"
    if found.local_processes:
        console.print(f"stopped {found.local_processes} process(es) of {report.name} on this machine "
                      "(found by their owner tag in the process table)")
    if found.deleted_in:
        console.print(f"{report.name} is down (deleted in {where} {', '.join(found.deleted_in)})")
        return
    if found.local_processes:
        console.print(f"nothing labelled podmanager-cluster={report.name} was left in the {where}s searched "
                      f"({', '.join(found.searched) or 'none'})")
        return
    console.print(f"nothing to delete: no local record of {report.name} and nothing labelled "
                  f"podmanager-cluster={report.name} in the {where}s searched ({', '.join(found.searched) or 'none'})")
    if where == "simulated project":
        console.print("If it runs on Google Cloud, pass --project PROJECT --zone ZONE to search there.")
