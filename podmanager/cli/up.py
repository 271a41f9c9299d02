"""`podmanager up`: create the spec's slices and join their hosts."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import typer
from rich.markup import escape

from podmanager import api
from podmanager.cli.render import console, print_event, print_status
from podmanager.state import Event


# Of a run of events of one kind (one per slice: 1,024 slices make 1,024 "creating" lines),
# this many are printed, then one line that counts the rest; `podmanager events` has them all.
SAME_KIND_SHOWN = 3


class EventFeed:
    """The event callback of `up`: prints each event and shows the latest on the rich status
    line, so a long wait always says what it waits for. A long run of one kind is shown by its
    first lines and a count."""

    def __init__(self, spinner: Any, show_event: Callable[[Event], None] = print_event):
        self.spinner = spinner
        self.show_event = show_event
        self.kind = ""
        self.seen = 0  # events of `kind` in a row

    def __call__(self, event: Event) -> None:
        if event.kind != self.kind:
            self.flush()
            self.kind = event.kind
        self.seen += 1
        if self.seen <= SAME_KIND_SHOWN:
            self.show_event(event)
        self.spinner.update(escape(f"{event.message} ..."))  # event text is not markup

    def flush(self) -> None:
        """Count what a run of one kind left unprinted."""
        hidden = self.seen - SAME_KIND_SHOWN
        if hidden > 0:
            console.print(f"  ... and {hidden} more {self.kind.replace('_', ' ')} "
                          "('podmanager events' lists them)", markup=False)
        self.seen = 0


def up(
    file: Path = typer.Option(..., "--file", "-f", metavar="SPEC", help="Cluster spec (YAML); see infra/examples/."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Use the local simulated cloud instead of GCP."),
    timeout: float = typer.Option(1800.0, "--timeout", metavar="SECONDS", help="Seconds to wait for every slice."),
) -> None:
    """Create the spec's slices (or finish a partial `up`) and wait until they are READY."""
    cluster = api.Cluster.from_yaml(file, dry_run=dry_run, on_event=print_event)
    with console.status(f"bringing up {cluster.name} ...") as spinner:
        cluster.on_event = feed = EventFeed(spinner)
        try:
            status = cluster.up(timeout_s=timeout)
        finally:
            feed.flush()
    print_status(status)
