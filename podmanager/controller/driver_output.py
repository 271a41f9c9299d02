"""Keep Ray's driver messages off podmanager's stdout.

Why this exists: a Ray driver runs a thread that prints every error the cluster publishes —
"(raylet) The node ... has been marked dead", "A worker died or was killed" — straight to
the driver's stdout, in colour, and Ray has no setting to turn it off (`log_to_driver=False`
only stops the workers' output). For podmanager those messages are expected (a preempted
simulated VM is exactly a node that dies) and they broke `--json` output and the run's
stream. So the one function that thread prints through is wrapped: messages from the raylet
go to the `podmanager.ray` logger instead (shown with `-v`, kept out of stdout), anything
else is printed as Ray would.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

log = logging.getLogger("podmanager.ray")


def _quiet(original: Callable[..., None]) -> Callable[..., None]:
    def print_to_stdstream(data: dict[str, Any], ignore_prefix: bool) -> None:
        if data.get("pid") == "raylet":
            for line in data.get("lines", []):
                log.info("%s", line)
            return
        original(data, ignore_prefix)

    print_to_stdstream.podmanager_quiet = True  # type: ignore[attr-defined]
    return print_to_stdstream


def keep_ray_messages_off_stdout() -> None:
    """Route the raylet's messages to logging in this process (idempotent)."""
    from ray._private import worker

    if not getattr(worker.print_to_stdstream, "podmanager_quiet", False):
        worker.print_to_stdstream = _quiet(worker.print_to_stdstream)
