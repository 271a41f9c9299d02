"""`podmanager run`: submit a program to every host of the cluster's slices and follow it."""

from __future__ import annotations

from shlex import quote
from typing import Optional

import typer

from podmanager import api
from podmanager.cli.follow import detach_or_cancel, follow_run
from podmanager.cli.options import CLUSTER_OPTION, env_pairs
from podmanager.cli.render import console, print_json
from podmanager.core import selectors
from podmanager.core.errors import SpecError


def run(
    program: Optional[list[str]] = typer.Argument(None, metavar="PROGRAM [ARGS]", hidden=True),
    cluster: Optional[str] = CLUSTER_OPTION,
    parallelism: Optional[str] = typer.Option(
        None, "--parallelism", "-p", metavar="MESH", help="Mesh: data, model or data=2,model=4; checked against the chips first."),
    slices: Optional[str] = typer.Option(
        None, "--slices", metavar="SLICES", help="Slices to use, e.g. 0,1 or slice-0 or demo-s1 (default: all)."),
    env: Optional[list[str]] = typer.Option(
        None, "--env", "-e", metavar="NAME=VALUE", help="An environment variable for every process (repeat)."),
    checkpoint_dir: Optional[str] = typer.Option(
        None, "--checkpoint-dir", metavar="DIR", help="Where checkpoints go (shared by all hosts; a gs:// bucket on GCP)."),
    working_dir: str = typer.Option(".", "--working-dir", metavar="DIR", help="Folder shipped to every host; the program runs in it."),
    requirements: Optional[str] = typer.Option(
        None, "--requirements", "-r", metavar="FILE",
        help="A requirements file (pip's format) installed on every host, on top of JAX and podmanager, before the program starts."),
    all_hosts: bool = typer.Option(False, "--all-hosts", help="Stream every host's output, not only worker 0's."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as one JSON object at the end."),
    detach: bool = typer.Option(False, "--detach", "-d", help="Print the run id and return at once."),
    cancel_on_interrupt: bool = typer.Option(
        False, "--cancel-on-interrupt", help="Ctrl-C cancels the run instead of detaching from it."),
    down_on_exit: bool = typer.Option(False, "--down-on-exit", help="Delete the cluster when the run ends."),
    max_preemptions: Optional[int] = typer.Option(None, "--max-preemptions", metavar="N", min=0, help="Overrides recovery.max_preemptions."),
    max_failures: Optional[int] = typer.Option(None, "--max-failures", metavar="N", min=0, help="Overrides recovery.max_failures."),
    max_hangs: Optional[int] = typer.Option(None, "--max-hangs", metavar="N", min=0, help="Overrides recovery.max_hangs."),
    hang_timeout: Optional[float] = typer.Option(
        None, "--hang-timeout", metavar="SECONDS", help="Seconds without a step (after the first) that count as a hang."),
    min_slices: Optional[int] = typer.Option(
        None, "--min-slices", metavar="M",
        help="Elastic: a slice lost with no spare ready, go on at once on the slices left (at least M) and grow back "
             "when it is replaced (default: wait for it)."),
) -> None:
    """Run a JAX program on every host of the cluster's slices.

    PROGRAM is a .py file (or -m module) in the working dir, with its own ARGS after it; anything else after `--` is a command run as is, with $VARS (e.g. $JAX_PROCESS_ID) expanded per host. Options go before PROGRAM: everything after it is the program's.

    The run is supervised on the cluster's side: Ctrl-C only detaches (a second Ctrl-C within 2 s cancels), and `podmanager attach RUN` follows it again.
    """  # noqa: E501 - typer keeps line breaks inside later paragraphs
    if detach and down_on_exit:
        raise SpecError("--down-on-exit: needs a client that waits for the run; drop --detach, or run "
                        "'podmanager down' after the run")
    from podmanager.core.workload import (
        Workload,  # pydantic: loaded when a run is parsed, not for --help
    )

    target = api.resolve_cluster(cluster)
    workload = Workload.from_argv(program or [],
                                  slices=None if slices is None else selectors.parse_slices(slices, target.name,
                                                                                            flag="--slices"),
                                  parallelism=parallelism, env=env_pairs(env), checkpoint_dir=checkpoint_dir,
                                  working_dir=working_dir, requirements=requirements, hang_timeout_s=hang_timeout,
                                  min_slices=min_slices)
    budgets = {k: v for k, v in (("max_preemptions", max_preemptions), ("max_failures", max_failures),
                                 ("max_hangs", max_hangs)) if v is not None}
    if detach:
        try:
            handle = target.submit(workload, budgets=budgets)
            status = handle.status().status if as_json else None  # read before the channel closes
        finally:
            target.close()
        if as_json:
            print_json({"run_id": handle.run_id, "cluster": handle.cluster, "status": status})
        else:
            console.print(f"submitted run {handle.run_id}\n"
                          f"  follow it: podmanager attach {quote(handle.run_id)}\n"
                          f"  cancel it: podmanager cancel {quote(handle.run_id)}", markup=False)
        return

    def run_and_follow(printer, on_event, on_interrupt):  # type: ignore[no-untyped-def]
        return target.run(workload, printer=printer, budgets=budgets, down_on_exit=down_on_exit,
                          on_interrupt=on_interrupt, on_event=on_event)

    follow_run(run_and_follow, all_hosts=all_hosts, as_json=as_json, interrupt=detach_or_cancel(cancel_on_interrupt))
