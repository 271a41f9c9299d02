"""`podmanager sim ...`: inject faults into a dry-run cluster."""

from __future__ import annotations

from typing import Optional

import typer

from podmanager import api
from podmanager.api import simulation
from podmanager.cli.options import CLUSTER_OPTION
from podmanager.cli.render import console
from podmanager.core import selectors
from podmanager.core.errors import SpecError
from podmanager.core.fault_text import (
    CREATE_KINDS,
    DEFAULT_TIMES,
    FAULT_HELP,
    UNTIL_CLEARED,
)


def preempt(
    cluster: Optional[str] = CLUSTER_OPTION,
    slice_name: str = typer.Option(..., "--slice", metavar="SLICE", help="The slice: 0, slice-0 or its node name."),
    notice: str = typer.Option("0", "--notice", metavar="DURATION", help="Announce it this long before, e.g. 10s."),
) -> None:
    """Preempt a slice now, or after a notice period (as the metadata server announces it)."""
    from podmanager.core import (
        faults,  # loads pydantic: when a command runs, not for --help
    )

    target = api.resolve_cluster(cluster)
    slice_index = selectors.parse_slice(slice_name, target.name, flag="--slice")
    fault = faults.from_flags({"kind": "preempt", "slice": slice_index, "notice_s": notice},
                              {"slice": "--slice", "notice_s": "--notice"})
    console.print(target.inject(fault))


def fail_create(
    cluster: Optional[str] = CLUSTER_OPTION,
    kind: str = typer.Option("capacity", "--kind", metavar="KIND", help="capacity, reservation, preempt-while-creating, invalid-request or quota."),
    zone: Optional[str] = typer.Option(None, "--zone", metavar="ZONE", help="Zone (default: the spec's first)."),
    times: int = typer.Option(DEFAULT_TIMES, "--times", metavar="N",
                              help=f"How many creates fail ({UNTIL_CLEARED}: every one until cleared)."),
) -> None:
    """Make the next slice creations fail."""
    from podmanager.core import (
        faults,  # loads pydantic: when a command runs, not for --help
    )

    if kind not in (*CREATE_KINDS, "quota"):
        raise SpecError(f"--kind: {kind!r} is not one of {', '.join(CREATE_KINDS)}, quota")
    target = api.resolve_cluster(cluster)
    values = {"kind": kind, "times": times}
    if kind != "quota":  # a quota is the project's, in every zone
        values["zone"] = zone or target.spec.zones[0]
    fault = faults.from_flags(values, {"zone": "--zone", "times": "--times"})
    console.print(target.inject(fault))


def hang(
    cluster: Optional[str] = CLUSTER_OPTION,
    host: str = typer.Option(..., "--host", metavar="HOST",
                             help="The host whose program freezes: SLICE/WORKER, e.g. 0/1 or slice-0/1."),
) -> None:
    """Freeze the running program on one host (SIGSTOP), as a hang would."""
    from podmanager.core import (
        faults,  # loads pydantic: when a command runs, not for --help
    )

    target = api.resolve_cluster(cluster)
    slice_index, worker_id = selectors.parse_host(host, target.name, flag="--host")
    fault = faults.from_flags({"kind": "hang", "slice": slice_index, "worker": worker_id}, {})
    try:
        console.print(target.inject(fault))
    finally:
        target.close()


def inject(
    fault_texts: list[str] = typer.Argument(..., metavar="FAULT...", help=f"Faults: {FAULT_HELP}."),
    cluster: Optional[str] = CLUSTER_OPTION,
) -> None:
    """Inject faults written as text, as the spec's and the emulator's (e.g. capacity:sim-zone-a:2 transient:3)."""
    from podmanager.core import (
        faults,  # loads pydantic: when a command runs, not for --help
    )

    parsed = [faults.parse(text, flag="FAULT") for text in fault_texts]  # all checked before any is injected
    target = api.resolve_cluster(cluster)
    try:
        for fault in parsed:
            console.print(target.inject(fault))
    finally:
        target.close()


def head_crash(cluster: Optional[str] = CLUSTER_OPTION) -> None:
    """Kill the cluster's Ray head (SIGKILL), as a crash of the machine that runs it; 'up' brings it back."""
    target = api.resolve_cluster(cluster)
    try:
        console.print(target.head_crash())
    finally:
        target.close()


def controller_crash(cluster: Optional[str] = CLUSTER_OPTION) -> None:
    """Kill every process of the cluster's controller VM (SIGKILL), as a crash; it boots again from its disk."""
    target = api.resolve_cluster(cluster)
    try:
        console.print(target.controller_crash())
    finally:
        target.close()


def project(
    project_id: str = typer.Option(..., "--project", metavar="PROJECT", help="The simulated project (the spec's project)."),
    kind: Optional[str] = typer.Option(None, "--kind", metavar="KIND",
                                       help="Start the project again as: no-organization (the default: you are "
                                            "Owner, the default compute account Editor, podmanager's APIs enabled) "
                                            "or new (a new project of a secure-by-default organization)."),
    grant: Optional[str] = typer.Option(None, "--grant", metavar="ROLE", help="Grant --member this role, e.g. roles/tpu.admin."),
    revoke: Optional[str] = typer.Option(None, "--revoke", metavar="ROLE", help="Revoke this role of --member."),
    member: Optional[str] = typer.Option(None, "--member", metavar="MEMBER",
                                         help="user:EMAIL or serviceAccount:EMAIL."),
    enable: list[str] = typer.Option([], "--enable", metavar="SERVICE", help="Enable an API, e.g. tpu.googleapis.com."),
) -> None:
    """Change a dry run's simulated project as its console would: its IAM roles and enabled APIs."""
    import json

    changed = simulation.change_project(project_id, kind=kind, grant=grant, revoke=revoke, member=member, enable=enable)
    console.print_json(json.dumps(changed))


def controller_stop(cluster: Optional[str] = CLUSTER_OPTION,
                    suspend: bool = typer.Option(False, "--suspend", help="suspend it (SUSPENDED) instead of "
                                                                           "stopping it (TERMINATED)")) -> None:
    """Stop the cluster's controller VM (TERMINATED), as Compute Engine may; 'up' starts it again."""
    target = api.resolve_cluster(cluster)
    try:
        console.print(target.controller_stop(suspend=suspend))
    finally:
        target.close()


def register(app: typer.Typer, *, group: type, command: type) -> None:
    sim_app = typer.Typer(cls=group, help="Inject faults into a dry-run cluster (preemptions, failed creates, hangs).",
                          no_args_is_help=True)
    sim_app.command("preempt", cls=command)(preempt)
    sim_app.command("fail-create", cls=command)(fail_create)
    sim_app.command("head-crash", cls=command)(head_crash)
    sim_app.command("controller-crash", cls=command)(controller_crash)
    sim_app.command("controller-stop", cls=command)(controller_stop)
    sim_app.command("hang", cls=command)(hang)
    sim_app.command("inject", cls=command)(inject)
    sim_app.command("project", cls=command)(project)
    app.add_typer(sim_app, name="sim")
