"""Options shared by several commands."""

from __future__ import annotations

import typer

CLUSTER_OPTION = typer.Option(None, "--cluster", "-c", metavar="NAME", help="Cluster name (default: the only cluster).")
JSON_OPTION = typer.Option(False, "--json", help="Print JSON instead of a table.")
