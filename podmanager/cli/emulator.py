"""`podmanager emulator`: serve the simulated Cloud TPU API and Secret Manager over gRPC (and
the REST routes a VM's startup script uses: Secret Manager's, which it reads the token by, and
Cloud Storage's downloads from the simulated buckets) until Ctrl-C."""

from __future__ import annotations

import signal
import threading
from typing import Annotated

import typer

from podmanager.core.fault_text import FAULT_HELP

# Below the options, where a line has the terminal's width: in the options' help column a
# form such as maintenance:SLICE[:AFTER_S[:NOTICE_S[:DURATION_S]]] was cut to "maintenance:SLICE[…".
FAULTS_EPILOG = f"Faults (--fault): {FAULT_HELP}."


def emulator(
    port: Annotated[int, typer.Option(metavar="PORT", help="Port to listen on (0: any free port).")] = 8470,
    host: Annotated[str, typer.Option(metavar="ADDRESS", help="Address to listen on.")] = "127.0.0.1",
    project: Annotated[str, typer.Option(metavar="PROJECT", help="Project named in operation names.")] = "podmanager-sim",
    create_latency_s: Annotated[float, typer.Option(metavar="SECONDS", help="Seconds a node stays CREATING.")] = 0.5,
    rest_port: Annotated[int, typer.Option(
        "--rest-port", "--secrets-rest-port", metavar="PORT",
        help="Port of the REST routes for startup scripts: Secret Manager, Cloud Storage downloads (0: any free port)."
    )] = 0,
    fault: Annotated[list[str], typer.Option(metavar="FAULT", help="Fault to inject at start (repeatable); the forms are listed below.")] = [],  # noqa: B006
) -> None:
    """Serve the simulated Cloud TPU API (google.cloud.tpu.v2) and Secret Manager for TPU_EMULATOR_HOST."""
    from podmanager.cluster.backends import standalone_emulator
    from podmanager.core.faults import parse

    faults = [parse(text, flag="--fault") for text in fault]  # a bad one: exit 2 before anything starts
    # In memory, and its READY nodes boot as simulated TPU VMs that join the head named in their metadata.
    emulator = standalone_emulator(project, create_latency_s)
    for one in faults:
        one.apply(emulator.sim)  # a preempt:SLICE names no cluster here: refused, exit 2
    try:
        bound = emulator.start(host, port)
    except OSError as busy:
        raise typer.BadParameter(f"{busy}; pick another with --port (0: any free port)", param_hint="--port") from None
    try:
        rest_port = emulator.serve_rest(host, rest_port)
    except OSError as busy:
        emulator.stop()
        raise typer.BadParameter(f"{busy}; pick another with --rest-port (0: any free port)",
                                 param_hint="--rest-port") from None
    address = f"{host}:{bound}"
    typer.echo(f"Cloud TPU and Secret Manager emulator serving on {address} (project {project}); Ctrl-C to stop.")
    typer.echo(f"Secret Manager REST for startup scripts: PODMANAGER_SECRETS_API=http://{host}:{rest_port}/v1")
    typer.echo(f"Cloud Storage downloads (the simulated buckets): http://{host}:{rest_port}/storage/v1")
    typer.echo(f"export TPU_EMULATOR_HOST={address}")
    typer.echo(f"Set faults while it runs: python -m podmanager.emulator.control inject {address} capacity:ZONE")
    stop = threading.Event()
    # Its own handlers: started from a script or a non-interactive shell, SIGINT may arrive
    # ignored (so no KeyboardInterrupt), and SIGTERM is how service managers stop things.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        stop.wait()
        typer.echo("emulator stopped")
    finally:
        emulator.stop()
