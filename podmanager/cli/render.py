"""Output helpers shared by every command: tables, JSON, event lines, errors."""

from __future__ import annotations

import datetime
import json
import sys
from typing import Any, Iterable, Sequence

from rich.console import Console
from rich.table import Table

from podmanager.state import Event

console = Console(highlight=False)
errors = Console(stderr=True, highlight=False)


def print_json(data: Any) -> None:
    # Plain stdout, not rich: scripts parse this and it must never wrap.
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def print_table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*("-" if cell is None else str(cell) for cell in row))
    console.print(table)


def clock_time(when: float) -> str:
    return datetime.datetime.fromtimestamp(when).strftime("%H:%M:%S")


def print_event(event: Event) -> None:
    where = f" [slice {event.slice_index}]" if event.slice_index is not None else ""
    console.print(f"[dim]{clock_time(event.time)}[/dim] {event.kind}{where}: {event.message}")


def print_error(message: str) -> None:
    errors.print(f"[bold red]error:[/bold red] {message}", soft_wrap=True)
