"""`podmanager up`: create the spec's slices and join their hosts."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import typer
from rich.markup import escape

from podmanager import api
from podmanager.cli.render import console, print_event, print_json, print_status

if TYPE_CHECKING:  # for annotations: the state's records load pydantic, which --help does not need
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
    delete_on_failure: bool = typer.Option(
        False, "--delete-on-failure",
        help="If up fails, delete the slices it created (a cluster's first up: everything, as down does)."),
) -> None:
    """Make the cloud match the spec (create, delete or replace slices; or finish a partial `up`) and wait until every slice is READY.

    The plan (create / delete / replace / keep, per slice) is printed before anything changes. A spec that would take a slice from an active run is refused unless --force.
    """  # noqa: E501 - typer keeps line breaks inside later paragraphs
    cluster = api.Cluster.from_yaml(file, dry_run=dry_run)  # a controller VM's spec: reached over its channel
    if as_json:
        plans: list[api.UpPlan] = []
        status = cluster.up(timeout_s=timeout, force=force, on_plan=plans.append, on_event=_to_stderr,
                            delete_on_failure=delete_on_failure)
        print_json({"plan": plans[-1].as_dict(), "status": status.model_dump(mode="json")})
        return
    with console.status(f"bringing up {cluster.name} ...") as spinner:
        feed = EventFeed(spinner)
        try:
            status = cluster.up(timeout_s=timeout, force=force, on_event=feed, delete_on_failure=delete_on_failure)
        finally:
            feed.flush()
    print_status(status)
