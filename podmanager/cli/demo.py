"""`podmanager demo`: the dry-run demo, from up to down."""

from __future__ import annotations

import typer
from rich.markup import escape

from podmanager.cli.render import (
    console,
    print_event,
    print_status,
    print_summary,
    printer,
)


def demo() -> None:
    """A dry run on the simulated cloud: up, train across two slices, survive a preemption, down."""
    from podmanager.api.demo import (  # imports Ray: only when the demo runs
        DEMO_NAME,
        run_demo,
    )

    console.print(f"podmanager demo: a cluster {DEMO_NAME} of two spot v4-8 slices on the simulated cloud; slice 1 is preempted "
                  "halfway through training and the run recovers from its last checkpoint.")
    result = run_demo(on_event=print_event, show_output=printer(all_hosts=False, to_stderr=False),
                      show_status=print_status, say=lambda text: console.print(escape(text), style="bold"))
    print_summary(result, logs_kept=False)
    console.print(f"the run's logs were on the controller VM, which the demo removed with {DEMO_NAME}: the output "
                  "above is worker 0's", markup=False)
    if result.status != "succeeded":
        raise typer.Exit(1)
    console.print("demo finished: the cluster was created, trained on, recovered and removed again")
