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

Exit codes (what the supervisor reads from a workload process):

* ``0`` (``EXIT_OK``): finished all its steps.
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
``MEGASCALE_SLICE_ID``, ``PODMANAGER_CLUSTER``, ``PODMANAGER_SLICE``,
``PODMANAGER_CHECKPOINT_DIR``, ``PODMANAGER_PROGRESS_FILE``; optional knobs
``PODMANAGER_INIT_TIMEOUT`` and ``PODMANAGER_HEARTBEAT_TIMEOUT`` (seconds).
The other ``TPU_*``/``MEGASCALE_*`` variables are read by JAX/libtpu itself.

Progress file: one JSON object per line, ``{"step", "time", "process_id",
<metrics as floats>}``, appended by every process (non-finite floats are
written as ``NaN``/``Infinity``, which Python's ``json`` reads back).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import threading
import time
from collections.abc import Mapping
from typing import Any

EXIT_OK = 0
EXIT_PREEMPTED = 75

MESH_AXES = ("data", "model")

#: Seconds ``initialize`` waits for all peers to join before it fails.
DEFAULT_INIT_TIMEOUT_S = 120


# --------------------------------------------------------------------------
# Launch environment
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LaunchEnv:
    """The distributed environment the scheduler sets for one process."""

    coordinator_address: str | None
    num_processes: int
    process_id: int
    num_slices: int = 1
    slice_id: int = 0
    cluster: str | None = None
    checkpoint_dir: str | None = None
    progress_file: str | None = None

    @property
    def distributed(self) -> bool:
        return self.num_processes > 1


def _int_env(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer") from None


def launch_env(env: Mapping[str, str] | None = None) -> LaunchEnv:
    """Parse the scheduler's environment (``os.environ`` by default). Pure."""
    env = os.environ if env is None else env
    num = _int_env(env, "JAX_NUM_PROCESSES", 1)
    pid = _int_env(env, "JAX_PROCESS_ID", 0)
    coord = env.get("JAX_COORDINATOR_ADDRESS") or None
    if num < 1:
        raise ValueError(f"JAX_NUM_PROCESSES={num} must be >= 1")
    if not 0 <= pid < num:
        raise ValueError(f"JAX_PROCESS_ID={pid} is outside [0, {num})")
    if num > 1 and coord is None:
        raise ValueError(f"JAX_NUM_PROCESSES={num} but JAX_COORDINATOR_ADDRESS is not set")
    return LaunchEnv(
        coordinator_address=coord,
        num_processes=num,
        process_id=pid,
        num_slices=_int_env(env, "MEGASCALE_NUM_SLICES", 1),
        slice_id=_int_env(env, "MEGASCALE_SLICE_ID", _int_env(env, "PODMANAGER_SLICE", 0)),
        cluster=env.get("PODMANAGER_CLUSTER") or None,
        checkpoint_dir=env.get("PODMANAGER_CHECKPOINT_DIR") or None,
        progress_file=env.get("PODMANAGER_PROGRESS_FILE") or None,
    )


_initialized = False
_init_lock = threading.Lock()


def initialize(timeout_s: int | None = None) -> LaunchEnv:
    """Join the global JAX job described by the environment. Idempotent.

    Calls ``jax.distributed.initialize(coordinator, num_processes, process_id)``
    when ``JAX_NUM_PROCESSES > 1``; with one process (or no environment at all)
    it does nothing. Must run before any other JAX call. A peer or
    coordinator that never shows up makes JAX abort the process (SIGABRT,
    exit 134, "DEADLINE_EXCEEDED" on stderr) after ``timeout_s`` (default
    ``PODMANAGER_INIT_TIMEOUT`` or 120 s) instead of hanging forever. On CPU,
    JAX's default cross-process collectives (gloo) are used; nothing to set.
    ``PODMANAGER_HEARTBEAT_TIMEOUT`` (seconds), when set, shortens how long
    survivors wait before JAX aborts them after a peer died (JAX default 100).
    """
    global _initialized
    le = launch_env()
    with _init_lock:
        if _initialized or not le.distributed:
            _initialized = True
            return le
        import jax

        if not jax.distributed.is_initialized():
            if timeout_s is None:
                timeout_s = _int_env(os.environ, "PODMANAGER_INIT_TIMEOUT", DEFAULT_INIT_TIMEOUT_S)
            extra = {}
            heartbeat = _int_env(os.environ, "PODMANAGER_HEARTBEAT_TIMEOUT", 0)
            if heartbeat > 0:
                extra["heartbeat_timeout_seconds"] = heartbeat
            jax.distributed.initialize(
                coordinator_address=le.coordinator_address,
                num_processes=le.num_processes,
                process_id=le.process_id,
                initialization_timeout=int(timeout_s),
                **extra,
            )
        _initialized = True
        # JAX's own preemption notifier may have replaced our SIGTERM handler.
        if _handler_installed:
            _install_signal_handlers(_handled_signals)
        return le


# --------------------------------------------------------------------------
# Mesh
# --------------------------------------------------------------------------


def parse_parallelism(text: str | Mapping[str, int], n_devices: int) -> dict[str, int]:
    """Turn a parallelism spec into ``{"data": d, "model": m}`` with ``d*m == n_devices``.

    Accepted forms: ``"data"`` (all devices on data), ``"model"`` (all on
    model), ``"data=2,model=4"``, ``"model=4,data=2"``, ``"data=2,model"``
    (a bare axis, or ``axis=-1``, takes what is left; at most one), or a
    mapping such as ``{"data": 2, "model": 4}``. An axis not named is 1.
    Raises ``ValueError`` with a message naming the counts. Pure.
    """
    if n_devices < 1:
        raise ValueError(f"n_devices must be >= 1, got {n_devices}")
    items: list[tuple[str, int]] = []
    if isinstance(text, Mapping):
        for k, v in text.items():
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"parallelism {dict(text)!r}: size of {k!r} must be an int")
            items.append((str(k).strip(), v))
        shown = ",".join(f"{k}={v}" for k, v in items)
    else:
        shown = text.strip()
        if not shown:
            raise ValueError("parallelism is empty; use e.g. 'data', 'model' or 'data=2,model=4'")
        for part in shown.split(","):
            part = part.strip()
            if "=" in part:
                name, _, raw = part.partition("=")
                raw = raw.strip()
                if raw in ("*", "-1"):
                    size = -1
                else:
                    try:
                        size = int(raw)
                    except ValueError:
                        raise ValueError(
                            f"parallelism {shown!r}: {part!r} needs an integer size"
                        ) from None
                items.append((name.strip(), size))
            else:
                items.append((part, -1))

    sizes: dict[str, int] = {}
    for name, size in items:
        if name not in MESH_AXES:
            raise ValueError(
                f"parallelism {shown!r}: unknown axis {name!r}; axes are {', '.join(MESH_AXES)}"
            )
        if name in sizes:
            raise ValueError(f"parallelism {shown!r}: axis {name!r} given twice")
        if size == 0 or size < -1:
            raise ValueError(f"parallelism {shown!r}: size of {name!r} must be positive")
        sizes[name] = size

    inferred = [n for n, s in sizes.items() if s == -1]
    if len(inferred) > 1:
        raise ValueError(f"parallelism {shown!r}: only one axis may take the remaining devices")
    fixed = math.prod(s for s in sizes.values() if s != -1)
    if inferred:
        if n_devices % fixed:
            raise ValueError(
                f"parallelism {shown!r}: {n_devices} devices are not divisible by {fixed}"
            )
        sizes[inferred[0]] = n_devices // fixed
    out = {axis: sizes.get(axis, 1) for axis in MESH_AXES}
    product = math.prod(out.values())
    if product != n_devices:
        raise ValueError(
            f"parallelism {shown!r} is data={out['data']} x model={out['model']} = {product} "
            f"devices, but there are {n_devices} devices"
        )
    return out


def device_grid(shape: Mapping[str, int], devices):
    """Arrange ``devices`` into a ("data", "model") array for a Mesh.

    One slice: ``mesh_utils.create_device_mesh`` (topology-aware on TPU; on
    CPU the global order, so "model" varies fastest and stays within a host
    and "data" spans hosts). Several slices (multislice TPU, devices with
    distinct ``slice_index``): a hybrid mesh whose "data" axis spans the
    slices over DCN and "model" stays inside a slice over ICI, so "data"
    must be a multiple of the slice count.
    """
    import numpy as np
    from jax.experimental import mesh_utils

    sizes = tuple(shape[a] for a in MESH_AXES)
    slices = sorted({getattr(d, "slice_index", 0) or 0 for d in devices})
    if len(slices) <= 1:
        return mesh_utils.create_device_mesh(sizes, devices)
    n = len(slices)
    if shape["data"] % n:
        raise ValueError(
            f"{n} slices need a 'data' axis that is a multiple of {n} "
            f"(model parallelism stays inside a slice), got data={shape['data']}"
        )
    per_slice = (shape["data"] // n, shape["model"])
    grid = mesh_utils.create_hybrid_device_mesh(per_slice, (n, 1), devices)
    return np.asarray(grid)


def mesh(parallelism: str | Mapping[str, int] = "data"):
    """A ``jax.sharding.Mesh`` with axes ("data", "model") over all global devices.

    Axis types are Auto, so XLA propagates shardings and tensor-parallel
    matmuls work (``jax.make_mesh`` would default to Explicit). Device order:
    see ``device_grid``. Raises ``ValueError`` when the shape does not fit.
    """
    import jax
    from jax.sharding import AxisType, Mesh

    devices = jax.devices()
    shape = parse_parallelism(parallelism, len(devices))
    return Mesh(
        device_grid(shape, devices),
        MESH_AXES,
        axis_types=(AxisType.Auto,) * len(MESH_AXES),
    )


# --------------------------------------------------------------------------
# Progress
# --------------------------------------------------------------------------

_progress_fds: dict[str, int] = {}
_progress_lock = threading.Lock()


def _process_index() -> int:
    """jax.process_index() once JAX is distributed, else the id from the environment."""
    import sys

    jax = sys.modules.get("jax")
    if jax is not None and jax.distributed.is_initialized():
        return int(jax.process_index())
    return launch_env().process_id


def report_progress(step: int, **metrics: Any) -> None:
    """Append ``{"step", "time", "process_id", **metrics}`` to PODMANAGER_PROGRESS_FILE.

    No-op when the variable is unset. Each line is written with one
    ``write(2)`` on an ``O_APPEND`` descriptor, so lines from several
    processes sharing the file do not interleave, and nothing is buffered.
    Metric values are converted with ``float()`` (a JAX scalar is fetched).
    """
    path = os.environ.get("PODMANAGER_PROGRESS_FILE")
    if not path:
        return
    record: dict[str, Any] = {
        "step": int(step),
        "time": time.time(),
        "process_id": _process_index(),
    }
    for k, v in metrics.items():
        record[k] = float(v)
    line = (json.dumps(record) + "\n").encode()
    with _progress_lock:
        fd = _progress_fds.get(path)
        if fd is None:
            parent = os.path.dirname(path)
            if parent:
                os.makedirs(parent, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            _progress_fds[path] = fd
        os.write(fd, line)


# --------------------------------------------------------------------------
# Checkpoints
# --------------------------------------------------------------------------


def _abstract(tree):
    import jax

    def leaf(x):
        sharding = getattr(x, "sharding", None)
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)

    return jax.tree.map(leaf, tree)


class Checkpointer:
    """Periodic, atomic checkpoints of one pytree, via orbax's CheckpointManager.

    Every process must call ``save``/``restore_latest`` at the same steps
    (they are collective); arrays may be sharded across processes. A step
    directory becomes visible only after orbax has finalized it (written
    under a temporary name, then renamed), so ``latest_step`` never returns
    a half-written checkpoint.

    ``directory`` defaults to ``PODMANAGER_CHECKPOINT_DIR``; with neither,
    the checkpointer is disabled (saves do nothing, nothing is restored).
    ``every_n_steps=0`` disables periodic saves; ``force=True`` still saves.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        every_n_steps: int = 0,
        *,
        max_to_keep: int | None = 3,
    ) -> None:
        if every_n_steps < 0:
            raise ValueError(f"every_n_steps must be >= 0, got {every_n_steps}")
        directory = directory or os.environ.get("PODMANAGER_CHECKPOINT_DIR") or None
        self.directory = os.path.abspath(os.fspath(directory)) if directory else None
        self.every_n_steps = every_n_steps
        self._manager = None
        if self.directory is not None:
            import orbax.checkpoint as ocp

            options = ocp.CheckpointManagerOptions(
                max_to_keep=max_to_keep,
                create=True,
                # Remove leftovers of saves that crashed before finalizing.
                cleanup_tmp_directories=True,
                # Synchronous: when save() returns, the step is final. A
                # preempted program must not exit with a save in flight.
                enable_async_checkpointing=False,
            )
            self._manager = ocp.CheckpointManager(self.directory, options=options)

    @property
    def enabled(self) -> bool:
        return self._manager is not None

    def latest_step(self) -> int | None:
        """The newest complete checkpoint's step, or None."""
        if self._manager is None:
            return None
        self._manager.reload()
        return self._manager.latest_step()

    def all_steps(self) -> list[int]:
        if self._manager is None:
            return []
        self._manager.reload()
        return sorted(self._manager.all_steps())

    def should_save(self, step: int) -> bool:
        return self.every_n_steps > 0 and step % self.every_n_steps == 0

    def save(self, step: int, pytree: Any, force: bool = False) -> bool:
        """Save ``pytree`` as ``step`` when due (or ``force``). Returns True if saved.

        A step that already has a checkpoint is not written again.
        """
        if self._manager is None or not (force or self.should_save(step)):
            return False
        import orbax.checkpoint as ocp

        if step in self._manager.all_steps():
            return False
        saved = self._manager.save(step, args=ocp.args.StandardSave(pytree), force=True)
        self._manager.wait_until_finished()
        return bool(saved)

    def restore_latest(self, template_pytree: Any) -> tuple[int, Any] | None:
        """Restore the newest complete checkpoint into ``template_pytree``'s layout.

        The template gives structure, shapes, dtypes and shardings (concrete
        arrays or ``jax.ShapeDtypeStruct``). Returns ``(step, pytree)`` or None.
        """
        step = self.latest_step()
        if step is None:
            return None
        import orbax.checkpoint as ocp

        restored = self._manager.restore(
            step, args=ocp.args.StandardRestore(_abstract(template_pytree))
        )
        return step, restored

    def close(self) -> None:
        if self._manager is not None:
            self._manager.wait_until_finished()
            self._manager.close()
            self._manager = None

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------
# Preemption
# --------------------------------------------------------------------------

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


def _reset_for_tests() -> None:
    """Clear the preemption flag and close progress files (tests only)."""
    _preempted.clear()
    with _progress_lock:
        for fd in _progress_fds.values():
            os.close(fd)
        _progress_fds.clear()
