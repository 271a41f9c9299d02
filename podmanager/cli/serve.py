"""`podmanager serve`: a program that calls `runtime.serve` as a service, one replica per slice,
behind one HTTP endpoint."""

from __future__ import annotations

from typing import Optional

import typer

from podmanager import api
from podmanager.cli.follow import follow_service
from podmanager.cli.options import CLUSTER_OPTION, env_pairs
from podmanager.cli.render import console, print_json
from podmanager.core import selectors


def serve(
    program: Optional[list[str]] = typer.Argument(None, metavar="PROGRAM [ARGS]", hidden=True),
    cluster: Optional[str] = CLUSTER_OPTION,
    replicas: Optional[int] = typer.Option(
        None, "--replicas", metavar="N", help="Replicas, one slice each (default: one per slice of --slices, or of the cluster)."),
    slices: Optional[str] = typer.Option(
        None, "--slices", metavar="SLICES", help="Slices the replicas run on, e.g. 0,1 (default: all)."),
    host: str = typer.Option("127.0.0.1", "--host", metavar="HOST", help="Where the endpoint listens (loopback by default, like the dashboard)."),
    port: int = typer.Option(0, "--port", metavar="PORT", min=0, max=65535, help="The endpoint's port (default: a free one)."),
    queue_timeout: float = typer.Option(
        60.0, "--queue-timeout", metavar="SECONDS", help="How long a request waits for a ready replica before a 503."),
    parallelism: Optional[str] = typer.Option(
        None, "--parallelism", "-p", metavar="MESH", help="Mesh of each replica: data, model or data=2,model=4."),
    env: Optional[list[str]] = typer.Option(
        None, "--env", "-e", metavar="NAME=VALUE", help="An environment variable for every process (repeat)."),
    checkpoint_dir: Optional[str] = typer.Option(
        None, "--checkpoint-dir", metavar="DIR", help="The checkpoints the replicas load (a training run's)."),
    follow_checkpoints: bool = typer.Option(
        False, "--follow-checkpoints", help="Roll each newer complete checkpoint of --checkpoint-dir into the replicas, one at a time (the program passes reload= to runtime.serve)."),
    working_dir: str = typer.Option(".", "--working-dir", metavar="DIR", help="Folder shipped to every host; the program runs in it."),
    requirements: Optional[str] = typer.Option(
        None, "--requirements", "-r", metavar="FILE", help="A requirements file installed on every host before the program starts."),
    as_json: bool = typer.Option(False, "--json", help="With --detach: print service_id and endpoint as JSON."),
    detach: bool = typer.Option(False, "--detach", "-d", help="Print the service id and endpoint and return once submitted."),
    max_preemptions: Optional[int] = typer.Option(None, "--max-preemptions", metavar="N", min=0, help="Per replica; overrides recovery.max_preemptions."),
    max_failures: Optional[int] = typer.Option(None, "--max-failures", metavar="N", min=0, help="Per replica; overrides recovery.max_failures."),
) -> None:
    """Serve a JAX program's predictions: one replica per slice (all its hosts), one HTTP endpoint (POST /predict, GET /healthz).

    PROGRAM is a .py file (or -m module) in the working dir that loads its model and calls runtime.serve(predict, warmup=...). A preempted replica's slice is replaced as for a run; its requests go to the others. Ctrl-C detaches; 'podmanager cancel SERVICE' stops it.
    """  # noqa: E501 - typer keeps line breaks inside later paragraphs
    from podmanager.api.serve import ServeOptions
    from podmanager.core.workload import Workload

    target = api.resolve_cluster(cluster)
    workload = Workload.from_argv(program or [],
                                  slices=None if slices is None else selectors.parse_slices(slices, target.name,
                                                                                            flag="--slices"),
                                  parallelism=parallelism, env=env_pairs(env), checkpoint_dir=checkpoint_dir,
                                  working_dir=working_dir, requirements=requirements)
    budgets = {k: v for k, v in (("max_preemptions", max_preemptions), ("max_failures", max_failures))
               if v is not None}
    options = ServeOptions(replicas=replicas, host=host, port=port, queue_timeout_s=queue_timeout,
                           follow_checkpoints=follow_checkpoints)
    from podmanager.api.serve import ServeInterrupted

    try:
        handle = target.serve(workload, options, budgets=budgets)
    except ServeInterrupted as interrupted:  # not up's message: say what became of the service
        console.print(f"\n{interrupted}", markup=False)
        raise typer.Exit(130) from None
    finally:
        target.close()
    if detach:  # a VM controller's service: no endpoint here once this command ends (`reach` says how)
        if as_json:
            print_json({"run_id": handle.service_id, "service_id": handle.service_id, "kind": "service",
                        "cluster": handle.cluster, "endpoint": handle.endpoint, "reach": handle.reach})
        else:
            _say_started(handle, handle.reach)
        return
    with handle.reachable(port=port) as endpoint:
        _say_started(handle, f"at {endpoint}")
        follow_service(handle)


def _say_started(handle: api.ServiceHandle | api.RemoteServiceHandle, where: str) -> None:
    console.print(f"service {handle.service_id} {where}  (POST /predict, GET /healthz)\n"
                  f"  list it:   podmanager runs -c {handle.cluster}\n"
                  f"  cancel it: podmanager cancel {handle.service_id}", markup=False)
