"""The `podmanager` command line: a thin skin over `podmanager.api`.

Each command module parses flags, calls the API and renders. Errors from the API become
one message and an exit code here, in `PodmanagerGroup.invoke`.
"""

from __future__ import annotations

import typer
from typer.core import TyperGroup

from podmanager.cli.render import print_error
from podmanager.core.errors import PodmanagerError


class PodmanagerGroup(TyperGroup):
    def invoke(self, ctx):  # type: ignore[no-untyped-def]
        try:
            return super().invoke(ctx)
        except PodmanagerError as error:
            print_error(str(error))
            raise typer.Exit(error.exit_code) from None
        except KeyboardInterrupt:
            print_error("interrupted. Run the same command again to resume, or 'podmanager down' to remove the cluster.")
            raise typer.Exit(130) from None


app = typer.Typer(
    cls=PodmanagerGroup,
    help="Provision Cloud TPU slices, join their hosts to Ray, run JAX across them, recover from preemptions.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

from podmanager.cli import (  # noqa: E402  (the commands register on `app`)
    accelerators,
    demo,
    down,
    emulator,
    events,
    logs,
    run,
    runs,
    sim,
    status,
    up,
)

for command in (up.up, status.status, down.down, events.events, demo.demo, logs.logs, runs.runs, runs.attach,
                runs.cancel):
    app.command()(command)
app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(run.run)
sim.register(app)
app.command(help="Serve the simulated Cloud TPU API over gRPC (for TPU_EMULATOR_HOST).")(emulator.emulator)
app.command(help="List every Cloud TPU accelerator type and its shape.")(accelerators.accelerators)


def main() -> None:
    app()
