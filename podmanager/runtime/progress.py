"""``report_progress``: one JSON line per step for the scheduler and the health monitor."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from typing import Any

from podmanager.runtime.contract import ENV_PROGRESS_FILE, PROGRESS_LOSS, ProgressRecord
from podmanager.runtime.launch import launch_env

_progress_fds: dict[str, int] = {}
_progress_lock = threading.Lock()
_declared_total: int | None = None  # the step count this process declared: every later line carries it
# By progress file: (step, time) of the newest checkpoint saved (every later line carries it),
# and the last line written.
_last_checkpoint: dict[str, tuple[int, float]] = {}
_last_record: dict[str, ProgressRecord] = {}


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
    saved = _last_checkpoint.get(path)
    record = ProgressRecord(step=int(step), time=time.time(), process_id=_process_index(),
                            loss=values.pop(PROGRESS_LOSS, None), metrics=values,
                            total_steps=_declared_total, done=bool(done),
                            checkpoint_step=saved[0] if saved else None, checkpoint_time=saved[1] if saved else None)
    _write(path, record)


def note_checkpoint(step: int) -> None:
    """Say that checkpoint `step` is saved and final (`Checkpointer.save` calls it): this
    process's last progress line is written again carrying it (same step, same time: no step
    is counted twice), so the supervisor sees it even if the program exits next, and every later
    line carries it too. Before the first `report_progress` it waits for that line."""
    path = os.environ.get(ENV_PROGRESS_FILE)
    if not path:
        return
    saved = _last_checkpoint[path] = (int(step), time.time())
    last = _last_record.get(path)
    if last is not None:
        _write(path, dataclasses.replace(last, checkpoint_step=saved[0], checkpoint_time=saved[1]))


def _write(path: str, record: ProgressRecord) -> None:
    line = record.to_line().encode()
    with _progress_lock:
        _last_record[path] = record
        fd = _progress_fds.get(path)
        if fd is None:
            parent = os.path.dirname(path)
            if parent:
                os.makedirs(parent, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            _progress_fds[path] = fd
        os.write(fd, line)
