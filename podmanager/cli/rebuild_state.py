"""`podmanager rebuild-state`: move a lost or damaged state store aside and rebuild it."""

from __future__ import annotations

from shlex import quote

import typer

from podmanager.cli.render import console


def rebuild_state(
    force: bool = typer.Option(False, "--force", help="Rebuild even a healthy store (its runs and events are lost)."),
) -> None:
    """Rebuild a missing or damaged state store from the cluster folders and the cloud."""
    from podmanager.api.rebuild import LOST  # loads the spec, the cloud: not for --help
    from podmanager.api.rebuild import rebuild_state as rebuild

    report = rebuild(force=force)
    if not report.rebuilt:
        console.print(f"the state store {report.path} is fine: nothing to rebuild "
                      "(--force rebuilds it anyway, losing its runs and events)")
        return
    console.print(report.problem or f"the state store {report.path} is rebuilt on request (--force)")
    for moved in report.moved_aside:
        console.print(f"  moved aside to {moved}")
    restored = ", ".join(report.restored) or "none"
    console.print(f"rebuilt: cluster(s) {restored}, from the spec copies in their folders")
    for name, why in report.skipped:
        console.print(f"  not restored: {name}: {why}")
    for name, project in report.unknown_in_cloud:
        console.print(f"  in simulated project {project} without a spec copy: {name}; 'podmanager up -f SPEC' "
                      f"takes it back, 'podmanager down -c {quote(name)} --dry-run' deletes it",
                      markup=False)
    console.print(f"lost: {LOST}")
