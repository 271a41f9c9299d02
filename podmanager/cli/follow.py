"""Following a run from the terminal: its output and events as they come, then the summary
and the exit code; or a service: a line whenever its replicas or counters change. Shared by
`run`, `serve` and `attach`."""

from __future__ import annotations

import sys
import time
from shlex import quote
from typing import Callable

import typer

from podmanager import api
from podmanager.cli.render import (
    console,
    errors,
    print_json,
    print_summary,
    printer,
    replicas_text,
)
from podmanager.core.events import EventKind

# Events worth a line while a run is followed (the rest are in `podmanager events`).
RUN_EVENTS = frozenset({
    EventKind.ATTEMPT_STARTED, EventKind.SETUP_STARTED, EventKind.SETUP_PROGRESS, EventKind.SETUP_DONE,
    EventKind.SETUP_FAILED, EventKind.WARNING, EventKind.INCIDENT, EventKind.SLICES_REPLACED, EventKind.RESUMED,
    EventKind.PREEMPTION_NOTICE, EventKind.RUN_FAILED, EventKind.BACKOFF, EventKind.ZONE_FALLBACK,
    EventKind.REATTACHED, EventKind.SUPERVISOR_RESTARTED, EventKind.RUN_CANCELLED,
    EventKind.RUN_SHRUNK, EventKind.RUN_GREW,
})


def follow_run(follow: Callable[..., api.RunResult], *, all_hosts: bool, as_json: bool,
               interrupt: Callable[[api.RunHandle], bool] | None = None) -> None:
    """Print a run until it ends, then its summary; exit 1 unless it succeeded (2 when it
    could not be set up), 130 when the user detached. `follow(printer, on_event, on_interrupt)` is the API call that
    follows it (`Cluster.run`, or a `RunHandle.follow`)."""
    try:
        result = follow(printer(all_hosts, to_stderr=as_json), _event_line(as_json), interrupt)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    if as_json:
        print_json(result.model_dump(mode="json"))
    else:
        print_summary(result)
    if result.setup_error is not None:  # bad input (a requirement, a missing program): nothing ran
        raise typer.Exit(2)
    if result.status != "succeeded":
        raise typer.Exit(1)


def _event_line(quiet: bool):  # type: ignore[no-untyped-def]
    def show(event) -> None:  # type: ignore[no-untyped-def]
        if event.kind in RUN_EVENTS:
            if quiet:
                sys.stderr.write(f"podmanager: {event.message}\n")
            else:
                console.print(f"podmanager: {event.message}", markup=False)

    return show


def detach_or_cancel(cancel: bool):  # type: ignore[no-untyped-def]
    """Ctrl-C while following: detach (the run goes on), or cancel on a second Ctrl-C within
    2 s, or at once with --cancel-on-interrupt."""

    def interrupted(handle: api.RunHandle) -> bool:
        if not cancel:
            console.print(f"\ndetached: run {handle.run_id} goes on (Ctrl-C again within 2 s cancels it).\n"
                          f"  follow it: podmanager attach {quote(handle.run_id)}\n"
                          f"  cancel it: podmanager cancel {quote(handle.run_id)}", markup=False)
            try:
                time.sleep(2.0)  # the window for a second Ctrl-C, which is a person's, not a condition
                return False
            except KeyboardInterrupt:
                pass
        console.print(f"cancelling run {handle.run_id} ...")
        run = handle.cancel()
        if run.checkpoint_dir:
            console.print(f"checkpoints are in {run.checkpoint_dir}: running the same program again resumes there")
        return True

    return interrupted


def follow_service(handle: api.ServiceHandle | api.RemoteServiceHandle, *, as_json: bool = False) -> None:
    """Print a line whenever the service's replicas or counters change, until it is no longer
    serving (then its summary with --json); Ctrl-C detaches (exit 130), the service goes on."""
    said: list[str] = []

    def show(summary: dict) -> None:
        line = (f"replicas {replicas_text(summary['replicas'])} | requests {summary['requests']}, "
                f"failures {summary['failures']}, 503s {summary['rejected']}, p50 {_ms(summary['p50_ms'])}, "
                f"p99 {_ms(summary['p99_ms'])}")
        if not said or line != said[-1]:
            (errors if as_json else console).print(f"{time.strftime('%H:%M:%S')} {line}", markup=False)
            said.append(line)

    try:
        summary = handle.follow(show)
    except KeyboardInterrupt:
        (errors if as_json else console).print(f"\ndetached; service {handle.service_id} goes on, {handle.reach}",
                                               markup=False)
        raise typer.Exit(130) from None
    if as_json:
        print_json(summary)
    else:
        console.print(f"service {handle.service_id} is {summary['status']}"
                      + (f": {summary['message']}" if summary["message"] else ""), markup=False)
    if summary["status"] == "failed":
        raise typer.Exit(1)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"
