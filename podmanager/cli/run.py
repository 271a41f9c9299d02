"""Workload commands: run, logs."""

from __future__ import annotations

import sys
from typing import Optional

import typer
from pydantic import ValidationError

from podmanager import api, run_logs
from podmanager.cli.render import console, print_json, print_table
from podmanager.errors import SpecError
from podmanager.scheduler import HostSlot
from podmanager.workload import Workload

CLUSTER_OPTION = typer.Option(None, "--cluster", "-c", help="Cluster name (default: the only cluster).")


def run(
    ctx: typer.Context,
    cluster: Optional[str] = CLUSTER_OPTION,
    parallelism: Optional[str] = typer.Option(
        None, "--parallelism", "-p", help="Mesh: data, model or data=2,model=4; checked against the chips first."),
    slices: Optional[str] = typer.Option(None, "--slices", help="Slice indexes to use, e.g. 0,1 (default: all)."),
    env: Optional[list[str]] = typer.Option(None, "--env", "-e", help="NAME=VALUE for every process (repeat)."),
    checkpoint_dir: Optional[str] = typer.Option(
        None, "--checkpoint-dir", help="Where checkpoints go (shared by all hosts; a gs:// bucket on GCP)."),
    working_dir: str = typer.Option(".", "--working-dir", help="Folder shipped to every host; the program runs in it."),
    all_hosts: bool = typer.Option(False, "--all-hosts", help="Stream every host's output, not only worker 0's."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as one JSON object at the end."),
    down_on_exit: bool = typer.Option(False, "--down-on-exit", help="Delete the cluster when the run ends."),
    max_preemptions: Optional[int] = typer.Option(None, "--max-preemptions", help="Overrides recovery.max_preemptions."),
    max_failures: Optional[int] = typer.Option(None, "--max-failures", help="Overrides recovery.max_failures."),
    max_hangs: Optional[int] = typer.Option(None, "--max-hangs", help="Overrides recovery.max_hangs."),
    hang_timeout: Optional[float] = typer.Option(
        None, "--hang-timeout", help="Seconds without a step (after the first) that count as a hang."),
) -> None:
    """Run a JAX program on every host of the cluster's slices.

    PROGRAM is a .py file (or -m module) in the working dir, with its own arguments after
    it; anything else after `--` is a command run as is, with $VARS (e.g. $JAX_PROCESS_ID)
    expanded per host.
    """
    workload = _workload(ctx.args, parallelism, slices, env, checkpoint_dir, working_dir, hang_timeout)
    target = api.resolve_cluster(cluster)
    overrides = {k: v for k, v in (("max_preemptions", max_preemptions), ("max_failures", max_failures),
                                   ("max_hangs", max_hangs)) if v is not None}
    policy = api.recovery_policy(target.spec, **overrides)
    target.on_event = _print_event_line(as_json)
    show = printer(all_hosts, to_stderr=as_json)
    try:
        result = target.run(workload, printer=show, policy=policy)
    finally:
        if down_on_exit:
            target.down()
        target.close()
    if as_json:
        print_json(result.as_dict())
    else:
        print_summary(result)
    if result.status != "succeeded":
        raise typer.Exit(1)


def _workload(args: list[str], parallelism: str | None, slices: str | None, env: list[str] | None,
              checkpoint_dir: str | None, working_dir: str, hang_timeout: float | None) -> Workload:
    if not args:
        raise SpecError("run: name a program (e.g. workloads/train_mlp.py) or a command after --")
    pairs = {}
    for item in env or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise SpecError(f"--env: {item!r} is not NAME=VALUE")
        pairs[name] = value
    try:
        indexes = [int(i) for i in slices.split(",")] if slices else None
    except ValueError:
        raise SpecError(f"--slices: {slices!r} is not a comma list of slice indexes like 0,1") from None
    common = dict(slices=indexes, parallelism=parallelism, env=pairs, checkpoint_dir=checkpoint_dir,
                  working_dir=working_dir, hang_timeout_s=hang_timeout)
    try:
        if args[0].endswith(".py"):
            return Workload(entrypoint=args[0], args=args[1:], **common)
        if args[0] == "-m" and len(args) > 1:
            return Workload(entrypoint=f"-m {args[1]}", args=args[2:], **common)
        return Workload(command=args, **common)
    except ValidationError as invalid:
        flags = {"hang_timeout_s": "--hang-timeout", "checkpoint_dir": "--checkpoint-dir"}
        problems = [f"{flags.get(str(e['loc'][0]), e['loc'][0]) if e['loc'] else 'run'}: {e['msg']}"
                    for e in invalid.errors()]
        raise SpecError("; ".join(problems)) from None


def printer(all_hosts: bool, *, to_stderr: bool):
    stream = sys.stderr if to_stderr else sys.stdout

    def show(slot: HostSlot, text: str) -> None:
        if all_hosts or slot.worker_id == 0:
            for line in text.splitlines():
                stream.write(f"[{slot.label}] {line}\n")
            stream.flush()

    return show


def _print_event_line(quiet: bool):
    def show(event) -> None:  # type: ignore[no-untyped-def]
        if event.kind in ("attempt_started", "incident", "slices_replaced", "resumed", "preemption_notice",
                          "run_failed", "backoff", "zone_fallback"):
            (console.print if not quiet else (lambda text: sys.stderr.write(text + "\n")))(
                f"podmanager: {event.message}")

    return show


def print_summary(result) -> None:  # type: ignore[no-untyped-def]
    failed = [h for h in result.hosts if h.exit_code not in (0, None) or h.lost]
    last = result.attempt_log[-1]
    if result.status != "succeeded" and last.last_lines:
        console.print(f"last output of {last.failed_host}:")
        for line in last.last_lines:
            console.print(f"  {line}", markup=False)
    metrics = result.metrics
    goodput = f"{result.goodput:.0%}" if result.goodput is not None else "-"
    console.print(f"{result.message}\nattempts {result.attempts}, preemptions {result.preemptions}, failures "
                  f"{result.failures}, hangs {result.hangs}, goodput {goodput}; steps {metrics['first_step']} -> "
                  f"{metrics['last_step']}, loss {metrics['first_loss']} -> {metrics['last_loss']}", markup=False)
    if result.incidents:
        print_table("incidents", ["attempt", "cause", "slices", "detect s", "recover s", "lost steps"],
                    [(i["attempt"], i["cause"], i["slices"], _seconds(i["detect_s"]), _seconds(i["recover_s"]),
                      i["lost_steps"]) for i in result.incidents])
    if failed:
        console.print("hosts that failed: " + ", ".join(f"slice-{h.slice}/host-{h.worker_id}" for h in failed))
    console.print(f"logs: podmanager logs -c {result.cluster} --run {result.run_id}")


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def logs(
    cluster: Optional[str] = CLUSTER_OPTION,
    run_id: Optional[str] = typer.Option(None, "--run", help="Run id (default: the latest)."),
    host: Optional[str] = typer.Option(None, "--host", help="Only this host, e.g. slice-0/1."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing until the run ends."),
) -> None:
    """Show the output of a run, every host's lines prefixed with its name."""
    name = cluster or api.resolve_cluster(None).name
    folder = run_logs.resolve_run(name, run_id)
    if follow:
        for where, line in run_logs.follow(folder, host):
            sys.stdout.write(f"[{where}] {line}\n")
            sys.stdout.flush()
        return
    for path in run_logs.host_files(folder, host):
        where = run_logs.label(path)
        for line in path.read_text(errors="replace").splitlines():
            sys.stdout.write(f"[{where}] {line}\n")


def register(app: typer.Typer) -> None:
    app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(run)
    app.command()(logs)
