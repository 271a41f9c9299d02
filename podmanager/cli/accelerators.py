from __future__ import annotations

import typer

from podmanager.cli.render import print_json, print_table
from podmanager.core.catalog import all_accelerators


def accelerators(
    generation: str = typer.Option(None, "--generation", "-g", metavar="GEN", help="Only this generation, e.g. v4 or v5litepod."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    items = [a for a in all_accelerators() if generation in (None, a.generation)]
    if generation and not items:
        raise typer.BadParameter(f"unknown generation {generation!r}", param_hint="--generation")
    if as_json:
        print_json([a.as_dict() for a in items])
        return
    print_table(None, ["name", "generation", "chips", "hosts", "chips/host", "topology", "runtime version"],
                [(a.name, a.generation, a.chips, a.hosts, a.chips_per_host, a.topology, a.runtime_version)
                 for a in items])
