"""How an attempt hands each host's output to whoever shows it (the CLI, a test).

What an attempt leaves behind (`AttemptResult`, each host's `HostResult`, a `SetupError`) is
part of the run's record: `core/run_results.py`."""

from __future__ import annotations

from typing import Callable

from podmanager.core.records import HostSlot

OutputPrinter = Callable[[HostSlot, str], None]
