"""Options shared by several commands."""

from __future__ import annotations

import re

import typer

from podmanager.core.errors import SpecError

CLUSTER_OPTION = typer.Option(None, "--cluster", "-c", metavar="NAME", help="Cluster name (default: the only cluster).")
JSON_OPTION = typer.Option(False, "--json", help="Print JSON instead of a table.")

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def env_pairs(items: list[str] | None) -> dict[str, str]:
    pairs = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not _ENV_NAME.fullmatch(name):
            raise SpecError(f"--env: {item!r} is not NAME=VALUE with NAME letters, digits and _ "
                            "(not starting with a digit)", hint="e.g. --env XLA_FLAGS=--xla_dump_to=/tmp/dump")
        pairs[name] = value
    return pairs
