"""The commands a hint or a summary suggests, checked against the CLI's real verbs and options
without running them: a hint that names an option its verb lacks fails the user who pastes it."""

from __future__ import annotations

import re
import shlex

import typer.main

from podmanager.cli import app

# A command in a message: quoted ('podmanager up -f SPEC') or after a label to the end of its
# line (logs: podmanager logs ...).
_QUOTED = re.compile(r"'(podmanager [^']*)'")
_TO_LINE_END = re.compile(r": (podmanager [^'\n]*)$", re.MULTILINE)


def suggested_commands(text: str) -> list[str]:
    """Every `podmanager ...` command `text` suggests."""
    return _QUOTED.findall(text) + _TO_LINE_END.findall(text)


def refusal(command: str) -> str | None:
    """Why the CLI would refuse `command` before running it (no such verb or option, a missing
    one), or None when it parses."""
    words = shlex.split(command)
    assert words[0] == "podmanager", command
    verb = typer.main.get_command(app)
    words = words[1:]
    while hasattr(verb, "commands"):  # a group (`sim`): its subcommand
        if not words or words[0] not in verb.commands:
            return f"no such verb in {command!r}"
        verb, words = verb.commands[words[0]], words[1:]
    try:
        verb.make_context(command, words)
    except Exception as refused:  # click's usage errors (typer carries its own copy of click)
        return refused.format_message() if hasattr(refused, "format_message") else str(refused)
    return None
