"""``report_progress``: one JSON line per step for the scheduler and the health monitor."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from podmanager.runtime.contract import ENV_PROGRESS_FILE, PROGRESS_LOSS, ProgressRecord
from podmanager.runtime.launch import launch_env

_progress_fds: dict[str, int] = {}
_progress_lock = threading.Lock()
_declared_total: int | None = None  # the step count this process declared: every later line carries it


def _process_index() -> int:
    """jax.process_index() once JAX is distributed, else the id from the environment."""
    import sys

    jax = sys.modules.get("jax")
    if jax is not None and jax.distributed.is_initialized():
        return int(jax.process_index())
    return launch_env().process_id


def report_progress(step: int, *, total_steps: int | None = None, done: bool = False, **metrics: Any) -> None:
    """Append ``{"step", "time", "process_id", **metrics}`` to PODMANAGER_PROGRESS_FILE.

    ``total_steps`` declares the program's step count (once is enough: this process's later
    lines carry it); ``done=True`` says the program has finished its work. Either tells
    podmanager that an exit after a preemption notice's SIGTERM is the run's end (``done``,
    or the step count reached), not a stop to resume from on the replacement slice.

    No-op when the variable is unset. Each line is written with one
    ``write(2)`` on an ``O_APPEND`` descriptor, so lines from several
    processes sharing the file do not interleave, and nothing is buffered.
    Metric values are converted with ``float()`` (a JAX scalar is fetched); a metric may not
    be called ``time`` or ``process_id`` (ValueError).
    """
    global _declared_total
    path = os.environ.get(ENV_PROGRESS_FILE)
    if not path:
        return
    if total_steps is not None:
        _declared_total = int(total_steps)
    values = {k: float(v) for k, v in metrics.items()}
    record = ProgressRecord(step=int(step), time=time.time(), process_id=_process_index(),
                            loss=values.pop(PROGRESS_LOSS, None), metrics=values,
                            total_steps=_declared_total, done=bool(done))
    line = record.to_line().encode()
    with _progress_lock:
        fd = _progress_fds.get(path)
        if fd is None:
            parent = os.path.dirname(path)
            if parent:
                os.makedirs(parent, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            _progress_fds[path] = fd
        os.write(fd, line)
