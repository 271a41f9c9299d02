"""`podmanager up`: create the spec's slices and join their hosts."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

import typer
from rich.markup import escape

from podmanager import api
from podmanager.cli.render import console, print_event, print_json, print_status
from podmanager.state import Event


def following(spinner: Any) -> Callable[[Event], None]:
    """An event callback that prints each event and shows the latest on the rich status
    line, so a long wait always says what it waits for."""

    def show(event: Event) -> None:
        print_event(event)
        spinner.update(escape(f"{event.message} ..."))  # event text is not markup

    return show


def _to_stderr(event: Event) -> None:
    # With --json stdout holds the one JSON object; progress goes beside it.
    sys.stderr.write(f"podmanager: {event.kind}: {event.message}\n")


def up(
    file: Path = typer.Option(..., "--file", "-f", metavar="SPEC", help="Cluster spec (YAML); see infra/examples/."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Use the local simulated cloud instead of GCP."),
    timeout: float = typer.Option(1800.0, "--timeout", metavar="SECONDS", help="Seconds to wait for every slice."),
    force: bool = typer.Option(
        False, "--force", help="Delete or replace slices that active runs use (an edited spec); those runs are cancelled first."),
    as_json: bool = typer.Option(
        False, "--json", help="Print the plan and the final status as one JSON object (progress goes to stderr)."),
) -> None:
    """Make the cloud match the spec (create, delete or replace slices; or finish a partial `up`) and wait until every slice is READY.

    The plan (create / delete / replace / keep, per slice) is printed before anything changes. A spec that would take a slice from an active run is refused unless --force.
    """  # noqa: E501 - typer keeps line breaks inside later paragraphs
    cluster = api.Cluster.from_yaml(file, dry_run=dry_run)
    if as_json:
        plans: list[api.UpPlan] = []
        cluster.on_event = _to_stderr
        status = cluster.up(timeout_s=timeout, force=force, on_plan=plans.append)
        print_json({"plan": plans[-1].as_dict(), "status": status.as_dict()})
        return
    with console.status(f"bringing up {cluster.name} ...") as spinner:
        cluster.on_event = following(spinner)
        status = cluster.up(timeout_s=timeout, force=force)
    print_status(status)
