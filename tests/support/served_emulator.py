"""A project's emulator serving its gRPC API and its REST routes, not saved to disk, for the
emulator's own tests that call it as Google's clients do."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from podmanager.emulator.server import Emulator


@contextmanager
def served_emulator(project: str) -> Iterator[Emulator]:
    """The emulator of `project`, stopped on leaving."""
    served = Emulator(project, persist=False)
    served.serve_rest()
    served.start()
    try:
        yield served
    finally:
        served.stop()
