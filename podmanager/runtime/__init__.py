"""What a JAX program launched by podmanager imports: ``from podmanager import runtime``.

The scheduler starts one process per TPU host and gives each a fresh
environment (see ``LaunchEnv``). A program built on this module does::

    runtime.install_preemption_handler()      # SIGTERM -> a flag
    runtime.initialize()                      # before any other JAX call
    mesh = runtime.mesh("data=2,model=4")     # axes ("data", "model")
    ckpt = runtime.Checkpointer(every_n_steps=50)
    restored = ckpt.restore_latest(state)     # None on a fresh start
    for step in ...:
        ...
        runtime.report_progress(step, loss=loss)
        ckpt.save(step, state)                # every_n_steps decides
        if runtime.preemption_requested_anywhere():
            ckpt.save(step, state, force=True)
            ckpt.close()
            sys.exit(runtime.EXIT_PREEMPTED)

A replica of a service (``podmanager serve``) loads its model, then hands a function of a
batch to ``runtime.serve(predict, warmup=[example])``, which returns ``EXIT_PREEMPTED`` once
a preemption notice drained it (see ``serving``).

Exit codes (what the supervisor reads from a workload process):

* ``0`` (``EXIT_OK``): finished all its steps. After a preemption notice's SIGTERM, any exit
  (0 included) is a stop for the notice, resumed on the replacement slice, unless the program
  said it was done: ``report_progress(step, done=True)``, or ``total_steps=N`` declared and
  step N reached.
* ``75`` (``EXIT_PREEMPTED``, BSD ``EX_TEMPFAIL``): stopped early at a step
  boundary because a preemption notice (SIGTERM) arrived, after writing a
  checkpoint if checkpointing is on. Relaunching resumes it. 75 is chosen on
  purpose instead of 143 (128 + SIGTERM): 143 is also what a shell reports for
  a process *killed* by SIGTERM before it could checkpoint, and the
  supervisor must be able to tell the two apart.
* ``134`` (SIGABRT, not ours): JAX aborted the process, typically because a
  peer died and the coordination-service heartbeat gave up.
* anything else: the program failed.

Environment read here (set by the scheduler): ``JAX_COORDINATOR_ADDRESS``,
``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID``, ``MEGASCALE_NUM_SLICES``,
``MEGASCALE_SLICE_ID``, ``PODMANAGER_CLUSTER``, ``PODMANAGER_SLICE``, ``PODMANAGER_NUM_SLICES``
(``slice_count()``: the slices this attempt runs on, fewer while an elastic run is shrunk),
``PODMANAGER_CHECKPOINT_DIR``, ``PODMANAGER_PROGRESS_FILE``; optional knobs
``PODMANAGER_INIT_TIMEOUT`` and ``PODMANAGER_HEARTBEAT_TIMEOUT`` (seconds).
The other ``TPU_*``/``MEGASCALE_*`` variables are read by JAX/libtpu itself.

Progress file: one JSON object per line, ``{"step", "time", "process_id",
<metrics as floats>}``, appended by every process (non-finite floats are
written as ``NaN``/``Infinity``, which Python's ``json`` reads back).
"""

from __future__ import annotations

import os

from podmanager.runtime import preemption, progress
from podmanager.runtime.checkpoints import Checkpointer
from podmanager.runtime.contract import EXIT_OK, EXIT_PREEMPTED
from podmanager.runtime.launch import (
    DEFAULT_INIT_TIMEOUT_S,
    LaunchEnv,
    initialize,
    launch_env,
    slice_count,
)
from podmanager.runtime.mesh import MESH_AXES, device_grid, mesh, parse_parallelism
from podmanager.runtime.preemption import (
    install_preemption_handler,
    preemption_requested,
    preemption_requested_anywhere,
    request_preemption,
)
from podmanager.runtime.progress import report_progress

__all__ = [
    "DEFAULT_INIT_TIMEOUT_S", "EXIT_OK", "EXIT_PREEMPTED", "MESH_AXES", "Checkpointer", "LaunchEnv",
    "device_grid", "initialize", "install_preemption_handler", "launch_env", "mesh", "parse_parallelism",
    "preemption_requested", "preemption_requested_anywhere", "report_progress", "request_preemption", "serve",
    "slice_count",
]


def _reset_for_tests() -> None:
    """Clear the preemption flag and close progress files (tests only)."""
    preemption._preempted.clear()
    progress._declared_total = None
    with progress._progress_lock:
        for fd in progress._progress_fds.values():
            os.close(fd)
        progress._progress_fds.clear()


def __getattr__(name: str):
    # `serve` loads on first use: its asyncio would cost every program ~60 ms at import.
    if name == "serve":
        from podmanager.runtime.serving import serve

        return serve
    raise AttributeError(f"module 'podmanager.runtime' has no attribute {name!r}")
