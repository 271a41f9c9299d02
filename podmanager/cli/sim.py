"""`podmanager sim ...`: inject faults into a dry-run cluster."""

from __future__ import annotations

from typing import Optional

import typer

from podmanager import api
from podmanager.api import simulation
from podmanager.cli.options import CLUSTER_OPTION
from podmanager.cli.render import console

sim_app = typer.Typer(help="Inject faults into a dry-run cluster (preemptions, failed creates, hangs).",
                      no_args_is_help=True)



@sim_app.command("preempt")
def preempt(
    cluster: Optional[str] = CLUSTER_OPTION,
    slice_index: int = typer.Option(..., "--slice", help="Index of the slice to preempt."),
    notice: str = typer.Option("0", "--notice", help="Announce it this long before, e.g. 10s."),
) -> None:
    """Preempt a slice now, or after a notice period (as the metadata server announces it)."""
    target = api.resolve_cluster(cluster)
    name = simulation.preempt(target, slice_index, simulation.parse_duration(notice, "--notice"))
    console.print(f"preempting {name}")


@sim_app.command("fail-create")
def fail_create(
    cluster: Optional[str] = CLUSTER_OPTION,
    kind: str = typer.Option("capacity", "--kind", help="capacity, reservation, preempt-while-creating or quota."),
    zone: Optional[str] = typer.Option(None, "--zone", help="Zone (default: the spec's first)."),
    times: int = typer.Option(1, "--times", min=1, help="How many creates fail."),
) -> None:
    """Make the next slice creations fail."""
    target = api.resolve_cluster(cluster)
    where = simulation.fail_create(target, kind, zone, times)
    console.print(f"the next {times} create(s) in {where} will fail with {kind}")


@sim_app.command("hang")
def hang(
    cluster: Optional[str] = CLUSTER_OPTION,
    host: str = typer.Option(..., "--host", help="The host whose program freezes, e.g. 0/1 (slice 0, worker 1)."),
) -> None:
    """Freeze the running program on one host (SIGSTOP), as a hang would."""
    target = api.resolve_cluster(cluster)
    slice_index, worker_id = simulation.parse_host(host)
    try:
        simulation.hang(target, slice_index, worker_id)
    finally:
        target.close()
    console.print(f"froze the workload on slice-{slice_index}/host-{worker_id}")


def register(app: typer.Typer) -> None:
    app.add_typer(sim_app, name="sim")
