"""`podmanager sim ...`: inject faults into a dry-run cluster."""

from __future__ import annotations

from typing import Optional

import typer

from podmanager import api
from podmanager.api import simulation
from podmanager.cli.options import CLUSTER_OPTION
from podmanager.cli.render import console
from podmanager.core import selectors
from podmanager.core.records import host_label


def preempt(
    cluster: Optional[str] = CLUSTER_OPTION,
    slice_name: str = typer.Option(..., "--slice", metavar="SLICE", help="The slice: 0, slice-0 or its node name."),
    notice: str = typer.Option("0", "--notice", metavar="DURATION", help="Announce it this long before, e.g. 10s."),
) -> None:
    """Preempt a slice now, or after a notice period (as the metadata server announces it)."""
    target = api.resolve_cluster(cluster)
    slice_index = selectors.parse_slice(slice_name, target.name, flag="--slice")
    name = simulation.preempt(target.runtime, slice_index, simulation.parse_duration(notice, "--notice"))
    console.print(f"preempting {name}")


def fail_create(
    cluster: Optional[str] = CLUSTER_OPTION,
    kind: str = typer.Option("capacity", "--kind", metavar="KIND", help="capacity, reservation, preempt-while-creating or quota."),
    zone: Optional[str] = typer.Option(None, "--zone", metavar="ZONE", help="Zone (default: the spec's first)."),
    times: int = typer.Option(1, "--times", min=1, metavar="N", help="How many creates fail."),
) -> None:
    """Make the next slice creations fail."""
    target = api.resolve_cluster(cluster)
    where = simulation.fail_create(target.runtime, kind, zone, times)
    console.print(f"the next {times} create(s) in {where} will fail with {kind}")


def hang(
    cluster: Optional[str] = CLUSTER_OPTION,
    host: str = typer.Option(..., "--host", metavar="HOST",
                             help="The host whose program freezes: SLICE/WORKER, e.g. 0/1 or slice-0/1."),
) -> None:
    """Freeze the running program on one host (SIGSTOP), as a hang would."""
    target = api.resolve_cluster(cluster)
    slice_index, worker_id = selectors.parse_host(host, target.name, flag="--host")
    try:
        simulation.hang(target.runtime, slice_index, worker_id)
    finally:
        target.close()
    console.print(f"froze the workload on {host_label(slice_index, worker_id)}")


def register(app: typer.Typer, *, group: type, command: type) -> None:
    sim_app = typer.Typer(cls=group, help="Inject faults into a dry-run cluster (preemptions, failed creates, hangs).",
                          no_args_is_help=True)
    sim_app.command("preempt", cls=command)(preempt)
    sim_app.command("fail-create", cls=command)(fail_create)
    sim_app.command("hang", cls=command)(hang)
    app.add_typer(sim_app, name="sim")
