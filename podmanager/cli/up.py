"""`podmanager up`: create the spec's slices and join their hosts."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import typer
from rich.markup import escape

from podmanager import api
from podmanager.cli.render import console, print_event, print_status
from podmanager.state import Event


def following(spinner: Any) -> Callable[[Event], None]:
    """An event callback that prints each event and shows the latest on the rich status
    line, so a long wait always says what it waits for."""

    def show(event: Event) -> None:
        print_event(event)
        spinner.update(escape(f"{event.message} ..."))  # event text is not markup

    return show


def up(
    file: Path = typer.Option(..., "--file", "-f", metavar="SPEC", help="Cluster spec (YAML); see infra/examples/."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Use the local simulated cloud instead of GCP."),
    timeout: float = typer.Option(1800.0, "--timeout", metavar="SECONDS", help="Seconds to wait for every slice."),
) -> None:
    """Create the spec's slices (or finish a partial `up`) and wait until they are READY."""
    cluster = api.Cluster.from_yaml(file, dry_run=dry_run, on_event=print_event)
    with console.status(f"bringing up {cluster.name} ...") as spinner:
        cluster.on_event = following(spinner)
        status = cluster.up(timeout_s=timeout)
    print_status(status)
