"""Workload commands: run, logs."""

from __future__ import annotations

import typer

from podmanager.errors import PodmanagerError


def run() -> None:
    """Run a JAX program on every host of the cluster's slices."""
    raise PodmanagerError("'podmanager run' is not available yet in this version")


def logs() -> None:
    """Show the output of a run."""
    raise PodmanagerError("'podmanager logs' is not available yet in this version")


def register(app: typer.Typer) -> None:
    app.command()(run)
    app.command()(logs)
