"""Output helpers shared by every command: tables, JSON, event lines, errors, cluster status,
run output and run summaries."""

from __future__ import annotations

import datetime
import json
import re
import sys
from shlex import quote  # every value in a command line a person may paste
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from podmanager.core.records import HostSlot, host_label

if TYPE_CHECKING:  # pydantic loads when a result is shown, not for --help
    from podmanager.core.run_results import RunResult
    from podmanager.state import Event

# Off a terminal (a pipe, a file, CI) rich would wrap at 80 columns and cut table cells: there,
# lines never wrap and tables take the width they need.
_UNBOUNDED = 100_000
console = Console(highlight=False, soft_wrap=True)
if not console.is_terminal:
    console = Console(highlight=False, soft_wrap=True, width=_UNBOUNDED)
errors = Console(stderr=True, highlight=False, soft_wrap=True)

# Gloo's connection chatter: one line per process and peer group at every start, no news in it.
_NOISE = re.compile(r"^\[Gloo\] Rank \d+ is connected to \d+ peer ranks")


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


def replicas_text(replicas: list[dict[str, Any]]) -> str:
    """A service's replicas in one cell: `0:ready@400, 1:reloading@400` (@ the checkpoint step)."""
    return ", ".join(f"{r['replica']}:{r['state']}" + ("" if r.get("step") is None else f"@{r['step']}")
                     for r in replicas)


def clock_time(when: float) -> str:
    return datetime.datetime.fromtimestamp(when).strftime("%H:%M:%S")


def print_event(event: Event) -> None:
    where = f" [slice {event.slice_index}]" if event.slice_index is not None else ""
    console.print(f"[dim]{clock_time(event.time)}[/dim] " + escape(f"{event.kind}{where}: {event.message}"))


def print_error(message: str) -> None:
    # Escaped: a message quotes what it names ("ray[default]==2.60.0"), which is no markup.
    errors.print(f"[bold red]error:[/bold red] {escape(message)}", soft_wrap=True)


def print_status(result: Any) -> None:
    print_table(
        f"cluster {result.name} ({result.backend}, project {result.project})"
        + (f", as the cloud reported it at {clock_time(result.slices_observed_at)}"
           if result.slices_observed_at else ""),
        ["slice", "role", "node", "accelerator", "zone", "state", "hosts", "chips", "boot"],
        [(s.index, "spare" if s.spare else "work", s.name, s.accelerator, s.zone, s.state, s.hosts, s.chips,
          _boot_summary(s.boot)) for s in result.slices],
    )
    if result.ray is not None:
        console.print(f"Ray: {result.ray.address}  dashboard: {result.ray.dashboard_url or '-'}  "
                      f"(podmanager ray-env -c {quote(result.name)} prints the exports for ray and ray.init)",
                      markup=False, highlight=False)
    if result.head_problem is not None:
        # `up` takes the cluster by its spec (it has no -c); a dry run's spec needs --dry-run
        # unless it says `backend: simulated` itself, and it is harmless then.
        again = "podmanager up -f SPEC" + (" --dry-run" if result.backend == "simulated" else "")
        console.print(f"{result.head_problem}: '{again}', SPEC the spec of {result.name}, starts it again "
                      "(the hosts rejoin, runs carry on)", style="bold red", markup=False, highlight=False)
    for service in result.services:
        console.print(f"service {service.service_id}: {service.endpoint} (replicas on slice(s) {service.slices})",
                      markup=False, highlight=False)
    if result.hosts:
        print_table(
            "hosts",
            ["slice", "worker", "ip", "chips", "agent", "last heartbeat", "detail"],
            [(h.slice_index, h.worker_id, h.ip, h.chips, h.state,
              clock_time(h.last_heartbeat) if h.last_heartbeat else None, h.detail) for h in result.hosts],
        )


def _boot_summary(stages: list[str]) -> str | None:
    """"joined", or each stage with its count ("1 joined, 1 installing") while they differ."""
    if not stages:
        return None
    counts = {stage or "booting": stages.count(stage) for stage in stages}
    if len(counts) == 1:
        return next(iter(counts))
    return ", ".join(f"{n} {stage}" for stage, n in counts.items())


def printer(all_hosts: bool, *, to_stderr: bool):
    stream = sys.stderr if to_stderr else sys.stdout

    def show(slot: HostSlot, text: str) -> None:
        if all_hosts or slot.worker_id == 0:
            for line in text.splitlines():
                if not _NOISE.match(line):
                    stream.write(f"[{slot.label}] {line}\n")
            stream.flush()

    return show


def print_summary(result: RunResult, *, logs_kept: bool = True) -> None:
    """The run's end; `logs_kept`: its logs are still on the cluster (after the demo's `down`
    they went with its controller VM, and a `logs` command would fail)."""
    failed = [h for h in result.hosts if h.exit_code not in (0, None) or h.lost] if result.status == "failed" else []
    last = result.attempt_log[-1] if result.attempt_log else None
    if result.setup_error is not None:
        console.print(f"setting up {result.setup_error.host} failed: {result.setup_error.error}", markup=False)
        for line in result.setup_error.lines:
            console.print(f"  {line}", markup=False)
    elif result.status == "failed" and last is not None and last.last_lines:
        console.print(f"last output of {last.failed_host}:")
        for line in last.last_lines:
            console.print(f"  {line}", markup=False)
    console.print(f"{result.message}\n" + "; ".join(summary_figures(result)), markup=False)
    if result.incidents:
        print_table("incidents", ["attempt", "cause", "slices", "spares", "detect s", "recover s", "lost steps"],
                    [(i.attempt, i.cause, ",".join(map(str, i.slices)) or "-",
                      ", ".join(f"{lost}->{spare}" for lost, spare in i.swaps or []) or "-",
                      _seconds(i.detect_s), _seconds(i.recover_s), i.lost_steps) for i in result.incidents])
    if failed:
        console.print("hosts that failed: " + ", ".join(host_label(h.slice, h.worker_id) for h in failed))
    if logs_kept:
        console.print(f"logs: podmanager logs -c {quote(result.cluster)} --run {quote(result.run_id)}", markup=False,
                      highlight=False)


def summary_figures(result: RunResult) -> list[str]:
    """The run's figures, each only when there is one: a command that reports no progress
    has no steps, loss or goodput to show."""
    figures = [f"attempts {result.attempts}, preemptions {result.preemptions}, failures {result.failures}, "
               f"hangs {result.hangs}"]
    if result.goodput is not None:
        figures.append(f"goodput {result.goodput:.0%}")
    if "degraded" in result.badput:
        figures.append(f"{result.badput['degraded']:.1f}s on fewer slices")
    metrics = result.metrics
    if metrics.last_step is not None:
        figures.append(f"steps {metrics.first_step} -> {metrics.last_step}")
    if metrics.last_loss is not None:
        figures.append(f"loss {_number(metrics.first_loss)} -> {_number(metrics.last_loss)}")
    return figures


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"
