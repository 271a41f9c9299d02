"""Cluster lifecycle commands: up, status, down, events, demo."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from podmanager import api
from podmanager.cli.render import (
    clock_time,
    console,
    print_event,
    print_json,
    print_table,
)

CLUSTER_OPTION = typer.Option(None, "--cluster", "-c", help="Cluster name (default: the only cluster).")
JSON_OPTION = typer.Option(False, "--json", help="Print JSON instead of a table.")


def up(
    file: Path = typer.Option(..., "--file", "-f", help="Cluster spec (YAML); see infra/examples/."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Use the local simulated cloud instead of GCP."),
    timeout: float = typer.Option(1800.0, "--timeout", help="Seconds to wait for every slice."),
) -> None:
    """Create the spec's slices (or finish a partial `up`) and wait until they are READY."""
    cluster = api.Cluster.from_yaml(file, dry_run=dry_run, on_event=print_event)
    with console.status(f"bringing up {cluster.name} ..."):
        status = cluster.up(timeout_s=timeout)
    _print_status(status)


def status(cluster: Optional[str] = CLUSTER_OPTION, as_json: bool = JSON_OPTION) -> None:
    """Slices (and hosts) of a cluster as the cloud reports them now."""
    result = api.resolve_cluster(cluster).status()
    if as_json:
        print_json(result.as_dict())
    else:
        _print_status(result)


def down(
    cluster: Optional[str] = CLUSTER_OPTION,
    file: Optional[Path] = typer.Option(None, "--file", "-f", help="Spec to find the cluster by (if its local state is lost)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="The cluster is on the simulated cloud."),
    project: Optional[str] = typer.Option(None, "--project", help="GCP project, when the local state is lost."),
    zones: Optional[list[str]] = typer.Option(None, "--zone", help="Zone to search, when the local state is lost (repeat)."),
) -> None:
    """Delete every slice and queued resource of the cluster, found by label. Safe to repeat."""
    if file is not None:
        target = api.Cluster.from_yaml(file, dry_run=dry_run, on_event=print_event)
    elif cluster is not None and (dry_run or project) and api.StateStore().get_cluster(cluster) is None:
        api.down_by_label(cluster, dry_run=dry_run, project=project, zones=zones)
        console.print(f"{cluster} is down")
        return
    else:
        target = api.resolve_cluster(cluster)
        target.on_event = print_event
    with console.status(f"tearing down {target.name} ..."):
        target.down()


def events(cluster: Optional[str] = CLUSTER_OPTION, as_json: bool = JSON_OPTION) -> None:
    """The cluster's event log: slices created, ready, preempted, deleted; zone fallbacks; retries."""
    name = cluster or api.resolve_cluster(None).name
    items = api.StateStore().events(name)
    if as_json:
        print_json([e.as_dict() for e in items])
        return
    for event in items:
        print_event(event)


def demo() -> None:
    """A dry run on the simulated cloud: up, train across two slices, survive a preemption, down."""
    from podmanager.cli.run import print_summary, printer
    from podmanager.demo import run_demo

    console.print("podmanager demo: two spot v4-8 slices on the simulated cloud; slice 1 is preempted "
                  "halfway through training and the run recovers from its last checkpoint.")
    result = run_demo(on_event=print_event, show_output=printer(all_hosts=False, to_stderr=False),
                      show_status=_print_status)
    print_summary(result)
    if result.status != "succeeded":
        raise typer.Exit(1)
    console.print("demo finished: the cluster was created, trained on, recovered and removed again")


def _print_status(result: api.ClusterStatus) -> None:
    print_table(
        f"cluster {result.name} ({result.backend}, project {result.project})",
        ["slice", "node", "accelerator", "zone", "state", "hosts", "chips"],
        [(s.index, s.name, s.accelerator, s.zone, s.state, s.hosts, s.chips) for s in result.slices],
    )
    if result.hosts:
        print_table(
            "hosts",
            ["slice", "worker", "ip", "chips", "agent", "last heartbeat", "detail"],
            [(h["slice_index"], h["worker_id"], h["ip"], h["chips"], h["state"],
              clock_time(h["last_heartbeat"]) if h["last_heartbeat"] else None, h["detail"]) for h in result.hosts],
        )


def register(app: typer.Typer) -> None:
    for command in (up, status, down, events, demo):
        app.command()(command)
