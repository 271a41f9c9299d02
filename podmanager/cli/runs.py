"""`podmanager runs`, `attach` and `cancel`: the runs of a cluster, which outlive the terminal
that started them."""

from __future__ import annotations

from typing import Optional

import typer

from podmanager import api
from podmanager.cli.follow import detach_or_cancel, follow_run, follow_service
from podmanager.cli.options import CLUSTER_OPTION, JSON_OPTION
from podmanager.cli.render import (
    clock_time,
    console,
    print_json,
    print_table,
    replicas_text,
)


def runs(cluster: Optional[str] = CLUSTER_OPTION, as_json: bool = JSON_OPTION) -> None:
    """Every run of the cluster: status, attempt, step, steps/s, goodput, setup time, cause of the last incident."""
    name = cluster or api.resolve_cluster(None).name  # a cluster that is down keeps its run history
    summaries = [api.run_summary(r) for r in api.run_history(name)]
    services = api.service_history(name)
    if as_json:
        print_json(sorted(summaries + services, key=lambda s: s["started"]))
        return
    print_table(f"runs of {name}", ["run", "status", "attempt", "step", "steps/s", "goodput", "setup s",
                                           "started", "last incident"],
                [(s["run_id"], s["status"], s["attempt"], s["step"],
                  None if s["steps_per_s"] is None else f"{s['steps_per_s']:.1f}",
                  None if s["goodput"] is None else f"{s['goodput']:.0%}", f"{s['setup_s']:.1f}",
                  clock_time(s["started"]), s["last_incident"]) for s in summaries])
    for s in summaries:
        for warning in s["warnings"]:
            console.print(f"warning: {s['run_id']}: {warning}", markup=False)
    if services:
        print_table(f"services of {name}", ["service", "status", "endpoint", "replicas", "requests", "failures",
                                            "503s", "p50 ms", "p99 ms", "goodput", "incidents", "started"],
                    [(s["run_id"], s["status"], s["endpoint"],
                      replicas_text(s["replicas"]), s["requests"], s["failures"],
                      s["rejected"], _ms(s["p50_ms"]), _ms(s["p99_ms"]),
                      None if s["goodput"] is None else f"{s['goodput']:.0%}", len(s["incidents"]),
                      clock_time(s["started"])) for s in services])


def _ms(value: float | None) -> str | None:
    return None if value is None else f"{value:.0f}"


def attach(
    run_id: str = typer.Argument(..., metavar="RUN", help="The run id ('podmanager runs' lists them)."),
    cluster: Optional[str] = CLUSTER_OPTION,
    all_hosts: bool = typer.Option(False, "--all-hosts", help="Stream every host's output, not only worker 0's."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as one JSON object at the end."),
) -> None:
    """Follow a run from its start (output, events) to its summary; Ctrl-C detaches again (a second within 2 s cancels). A service: its replicas and counters until it stops; Ctrl-C detaches."""  # noqa: E501
    target = api.resolve_cluster(cluster)
    if target.has_service(run_id):
        follow_service(target.service_handle(run_id), as_json=as_json)
        return
    handle = target.run_handle(run_id)
    follow_run(lambda printer, on_event, on_interrupt: handle.follow(printer, on_event, on_interrupt=on_interrupt),
               all_hosts=all_hosts, as_json=as_json, interrupt=detach_or_cancel(False))


def cancel(
    run_id: str = typer.Argument(..., metavar="RUN", help="The run or service id ('podmanager runs' lists them)."),
    cluster: Optional[str] = CLUSTER_OPTION,
) -> None:
    """Stop a run on every host and record it as cancelled: SIGTERM, then SIGKILL after 10 s (time to checkpoint). A service drains its replicas, then stops its router."""  # noqa: E501
    target = api.resolve_cluster(cluster)
    if target.has_service(run_id):
        service = target.cancel_service(run_id)
        console.print(f"service {run_id} is {service.status}")
        return
    record = target.run_handle(run_id).cancel()
    console.print(f"run {run_id} is {record.status}")
