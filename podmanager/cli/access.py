"""`podmanager access`: which laptops may reach a cluster's controller (its channel rule's callers)."""

from __future__ import annotations

from typing import Optional

import typer

from podmanager import api
from podmanager.cli.render import console, print_json

CLUSTER = typer.Option(..., "--cluster", "-c", metavar="NAME", help="The cluster's name.")
PROJECT = typer.Option(None, "--project", metavar="PROJECT", help="Its Google Cloud project.")
DRY_RUN = typer.Option(False, "--dry-run", help="Look in the local simulated cloud.")
JSON = typer.Option(False, "--json", help="Print the callers as JSON.")


def _show(found: api.ChannelAccess, as_json: bool) -> None:
    if as_json:
        print_json({"cluster": found.cluster, "rule": found.rule, "callers": found.callers,
                    "added": found.added, "revoked": found.revoked})
        return
    console.print(f"{found.rule} admits {', '.join(found.callers)}", markup=False)


def access(
    ctx: typer.Context,
    cluster: Optional[str] = typer.Option(None, "--cluster", "-c", metavar="NAME", help="The cluster's name."),
    project: Optional[str] = PROJECT,
    dry_run: bool = DRY_RUN,
    as_json: bool = JSON,
) -> None:
    """Show the addresses the cluster's controller admits (its channel rule's callers); 'add' and 'revoke' change them."""  # noqa: E501
    if ctx.invoked_subcommand is not None:
        return
    if cluster is None:
        raise typer.BadParameter("name the cluster", param_hint="'--cluster' / '-c'")
    _show(api.access_callers(cluster, project=project, dry_run=dry_run), as_json)


def add(cluster: str = CLUSTER, project: Optional[str] = PROJECT, dry_run: bool = DRY_RUN,
        as_json: bool = JSON) -> None:
    """Admit this machine: its public address, as the controller sees it, added to the channel rule."""
    found = api.access_add(cluster, project=project, dry_run=dry_run)
    if not as_json:
        console.print(f"added {found.added}", markup=False)
    _show(found, as_json)


def revoke(address: str = typer.Argument(..., metavar="ADDR", help="The address to remove (as 'access' lists it)."),
           cluster: str = CLUSTER, project: Optional[str] = PROJECT, dry_run: bool = DRY_RUN,
           as_json: bool = JSON) -> None:
    """Remove one address from the channel rule's callers (never the last)."""
    found = api.access_revoke(cluster, address, project=project, dry_run=dry_run)
    if not as_json:
        console.print(f"revoked {found.revoked}", markup=False)
    _show(found, as_json)


def register(app: typer.Typer, *, group: type, command: type) -> None:
    access_app = typer.Typer(cls=group, invoke_without_command=True)
    access_app.callback(invoke_without_command=True)(access)
    access_app.command("add", cls=command)(add)
    access_app.command("revoke", cls=command)(revoke)
    app.add_typer(access_app, name="access")
