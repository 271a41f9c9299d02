"""Preemption notices: SIGTERM becomes a flag the program polls at each step boundary."""

from __future__ import annotations

import signal
import threading

_preempted = threading.Event()
_handler_installed = False
_handled_signals: tuple[int, ...] = (signal.SIGTERM,)


def _on_signal(signum, frame) -> None:  # noqa: ARG001 - signal handler signature
    _preempted.set()


def _install_signal_handlers(signals: tuple[int, ...]) -> None:
    for sig in signals:
        signal.signal(sig, _on_signal)


def install_preemption_handler(signals: tuple[int, ...] = (signal.SIGTERM,)) -> None:
    """Turn SIGTERM (a preemption or maintenance notice) into a flag. Idempotent.

    Must be called from the main thread; before or after ``initialize()``
    (which re-installs it, in case JAX's own preemption notifier took
    SIGTERM over). The program then polls
    ``preemption_requested_anywhere()`` at each step boundary, checkpoints
    and exits with ``EXIT_PREEMPTED``.
    """
    global _handler_installed, _handled_signals
    _handled_signals = tuple(signals)
    _install_signal_handlers(_handled_signals)
    _handler_installed = True


def request_preemption() -> None:
    """Set the flag by hand (what the signal handler does)."""
    _preempted.set()


def preemption_requested() -> bool:
    """True once this process has received a preemption notice. Local, cheap."""
    return _preempted.is_set()


def preemption_requested_anywhere() -> bool:
    """True when any process of the job has received a notice.

    A notice may reach only some hosts, but the checkpoint that follows is
    collective, so all processes must decide together at the same step.
    With several processes this is a small all-gather: every process must
    call it at the same step boundary. With one process it is the local flag.
    """
    import sys

    jax = sys.modules.get("jax")
    if jax is None or not jax.distributed.is_initialized():
        return preemption_requested()
    import numpy as np
    from jax.experimental import multihost_utils

    flags = multihost_utils.process_allgather(np.array([preemption_requested()], np.int32))
    return bool(np.asarray(flags).any())


def reinstall_handler() -> None:
    """Install the handler again if the program asked for it (JAX's own preemption
    notifier may take SIGTERM over during ``jax.distributed.initialize``)."""
    if _handler_installed:
        _install_signal_handlers(_handled_signals)
