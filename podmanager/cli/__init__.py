"""The `podmanager` command line: a thin skin over `podmanager.api`.

Each command module parses flags, calls the API and renders. Errors from the API become
one message and an exit code here, in `PodmanagerGroup.invoke`.
"""

from __future__ import annotations

import difflib
import logging
import os
import signal
import sys
from typing import Any, Optional

import typer
from typer.core import TyperCommand, TyperGroup

from podmanager.cli.render import console, print_error
from podmanager.core.errors import PodmanagerError
from podmanager.core.version import __version__


def _flags_without_placeholders(params):  # type: ignore[no-untyped-def]
    """A flag takes no value: its help shows no `<bool>` after it (typer's default does)."""
    for param in params:
        if getattr(param, "is_flag", False):
            param.metavar = ""
    return params


class PodmanagerCommand(TyperCommand):
    def get_params(self, ctx):  # type: ignore[no-untyped-def]
        return _flags_without_placeholders(super().get_params(ctx))


class ProgramCommand(PodmanagerCommand):
    """`run`: podmanager's options, then the program (a .py file, `-m module`, or a command
    after `--`) with its arguments, which click collects unparsed."""

    def collect_usage_pieces(self, ctx):  # type: ignore[no-untyped-def]
        return ["[OPTIONS]", "PROGRAM [ARGS]..."]

    def parse_args(self, ctx, args):  # type: ignore[no-untyped-def]
        options, program = split_program(ctx, args, self.get_params(ctx))
        # After `--` click reads nothing: the program's `--steps 5` stays the program's.
        return super().parse_args(ctx, [*options, "--", *program])


def split_program(ctx: typer.Context, args: list[str], params: list[Any]) -> tuple[list[str], list[str]]:
    """(podmanager's options, the program and its arguments). Everything starting with `-`
    before the program is an option, and an unknown one is a usage error (exit 2): a typo
    must not become the program every host runs."""
    values: dict[str, int] = {}  # option name -> how many values it takes
    for param in params:
        if getattr(param, "param_type_name", None) == "option":
            for name in (*param.opts, *param.secondary_opts):
                values[name] = 0 if param.is_flag or param.count else param.nargs
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return args[:i], args[i + 1:]
        if arg == "-m" and "-m" not in values:
            if i + 1 == len(args):
                ctx.fail("-m: name the module to run, e.g. 'podmanager run -m pkg.train'")
            return args[:i], args[i:]
        if not arg.startswith("-") or arg == "-":
            return args[:i], args[i:]
        i += 1 + _values_taken(ctx, arg, values)
    return args, []


def _values_taken(ctx: typer.Context, arg: str, values: dict[str, int]) -> int:
    """How many of the next arguments option `arg` consumes (as click's parser does:
    `--opt=value`, `-pVALUE` and bundled flags `-dp VALUE`); a usage error if it is unknown."""
    if arg.startswith("--"):
        name, inline, _ = arg.partition("=")
        taken = _arity(ctx, name, values)
        return 0 if inline else taken
    for at, letter in enumerate(arg[1:], start=1):
        if taken := _arity(ctx, f"-{letter}", values):
            return 0 if at + 1 < len(arg) else taken  # the rest of `-pVALUE` is its value
    return 0


def _arity(ctx: typer.Context, name: str, values: dict[str, int]) -> int:
    if name in values:
        return values[name]
    close = difflib.get_close_matches(name, [n for n in values if n.startswith("--")], n=1)
    fix = (f"Did you mean {close[0]}?" if close
           else "The program's own options go after it: podmanager run [OPTIONS] PROGRAM [ARGS].")
    ctx.fail(f"No such option: {name}. {fix}")


# The API names a verb's positional argument (the program, the run id) by the verb it knows
# best, `run`; the command that was typed is the name a person reads (`serve:`, `cancel:`).
_ARGUMENT_PREFIXES = ("run: ", "RUN: ")


def _named_for(command: str | None, message: str) -> str:
    for prefix in _ARGUMENT_PREFIXES:
        if command and message.startswith(prefix):
            return f"{command}: {message[len(prefix):]}"
    return message


class PodmanagerGroup(TyperGroup):
    def get_params(self, ctx):  # type: ignore[no-untyped-def]
        return _flags_without_placeholders(super().get_params(ctx))

    def invoke(self, ctx):  # type: ignore[no-untyped-def]
        try:
            return super().invoke(ctx)
        except PodmanagerError as error:
            print_error(_named_for(ctx.invoked_subcommand, str(error)))
            raise typer.Exit(error.exit_code) from None
        except KeyboardInterrupt:
            # Only `up` leaves something half made to resume or remove; other verbs just stop.
            print_error("interrupted. Run the same command again to resume, or 'podmanager down' to remove the "
                        "cluster." if ctx.invoked_subcommand == "up" else "interrupted")
            raise typer.Exit(130) from None


app = typer.Typer(
    cls=PodmanagerGroup,
    help="Provision Cloud TPU slices, join their hosts to Ray, run JAX across them, recover from preemptions.",
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _print_version(value: bool) -> None:
    if value:
        console.print(f"podmanager {__version__}")
        raise typer.Exit(0)


@app.callback()
def root(ctx: typer.Context,
         version: Optional[bool] = typer.Option(None, "--version", help="Print the version and exit.",
                                                callback=_print_version, is_eager=True)) -> None:
    """Bare `podmanager` prints this help and exits 0 (click's own no-args help exits 2)."""
    if ctx.invoked_subcommand is None:
        console.print(ctx.get_help(), markup=False, highlight=False)
        raise typer.Exit(0)


from podmanager.cli import (  # noqa: E402  (the commands register on `app`)
    accelerators,
    access,
    connect,
    dashboard,
    demo,
    down,
    emulator,
    events,
    logs,
    ray_env,
    rebuild_state,
    run,
    runs,
    serve,
    sim,
    status,
    timeline,
    up,
)

for command in (up.up, status.status, down.down, events.events, demo.demo, logs.logs, runs.runs, runs.attach,
                runs.cancel, ray_env.ray_env, connect.connect,
                dashboard.dashboard, timeline.timeline):
    app.command(cls=PodmanagerCommand)(command)
app.command(cls=ProgramCommand)(run.run)
app.command(cls=ProgramCommand)(serve.serve)
sim.register(app, group=PodmanagerGroup, command=PodmanagerCommand)
access.register(app, group=PodmanagerGroup, command=PodmanagerCommand)
app.command(cls=PodmanagerCommand, help="Serve the simulated Cloud TPU API over gRPC (for TPU_EMULATOR_HOST).",
            epilog=emulator.FAULTS_EPILOG)(emulator.emulator)
app.command(cls=PodmanagerCommand, help="List every Cloud TPU accelerator type and its shape.")(accelerators.accelerators)
app.command("rebuild-state", cls=PodmanagerCommand)(rebuild_state.rebuild_state)


def _terminated(signum: int, frame: object) -> None:
    """SIGTERM (a closed session, `timeout`, a process manager): leave at once, as a detach.
    What the command started is durable: a run goes on under its supervisor, and an `up`
    cut short is resumed by running it again."""
    sys.stdout.flush()
    sys.stderr.write("\npodmanager: terminated; what it started goes on ('podmanager status', 'podmanager runs')\n")
    sys.stderr.flush()
    os._exit(128 + signum)


def main() -> None:
    """Exit right after the command: Ray's atexit shutdown of a driver that only looked
    (`status`) takes longer than the command itself, and nothing is left to clean up by
    then (every command stops what it started before it returns). Output is flushed first."""
    signal.signal(signal.SIGTERM, _terminated)
    try:
        app()
        code = 0
    except KeyboardInterrupt:  # between the imports and typer's own handler
        code = 130
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        if isinstance(done.code, str):
            sys.stderr.write(done.code + "\n")
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
