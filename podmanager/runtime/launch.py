"""The distributed environment the scheduler gives each process, and joining the JAX job."""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Mapping

from podmanager.runtime import preemption

#: Seconds ``initialize`` waits for all peers to join before it fails.
DEFAULT_INIT_TIMEOUT_S = 120
#: JAX's own switch for its preemption service (config ``jax_enable_preemption_service``).
#: On, ``jax.distributed.initialize`` installs a C++ SIGTERM handler that only records the
#: signal: a SIGTERM no longer ends the process, and replaces a Python handler installed
#: before. The scheduler sets it to ``false``; a program that wants the service (for
#: ``multihost_utils.reached_preemption_sync_point``) sets it back and ends itself on SIGTERM.
JAX_PREEMPTION_SERVICE_ENV = "JAX_ENABLE_PREEMPTION_SERVICE"
# Where JAX keeps what XLA compiled (its persistent cache; written by process 0 only).
JAX_COMPILATION_CACHE_ENV = "JAX_COMPILATION_CACHE_DIR"
# Compiles shorter than this (JAX: 1 s) are not kept.
JAX_CACHE_MIN_COMPILE_S_ENV = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"


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


def slice_count(env: Mapping[str, str] | None = None) -> int:
    """How many slices this attempt runs on: the launch's own count, else the multislice
    environment's, else 1. An elastic run (`run --min-slices`) may run on fewer slices than it
    was given while a lost one is made again, and on all of them again afterwards: a program
    that keeps its global batch constant divides it by the devices it has, not by a fixed count."""
    env = os.environ if env is None else env
    count = _int_env(env, "PODMANAGER_NUM_SLICES", _int_env(env, "MEGASCALE_NUM_SLICES", 1))
    if count < 1:
        raise ValueError(f"PODMANAGER_NUM_SLICES={count} must be >= 1")
    return count


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
            if not _jax_finds_the_cluster(os.environ):
                # Elsewhere (processes started by hand on CPU) the environment says it all.
                extra.update(num_processes=le.num_processes, process_id=le.process_id)
            if JAX_PREEMPTION_SERVICE_ENV not in os.environ:  # started by hand: SIGTERM stays ours
                jax.config.update("jax_enable_preemption_service", False)
            jax.distributed.initialize(coordinator_address=le.coordinator_address,
                                       initialization_timeout=int(timeout_s), **extra)
        _initialized = True
        # JAX's own preemption notifier (if the program turned it on) replaced our SIGTERM handler.
        preemption.reinstall_handler()
        return le


def _jax_finds_the_cluster(env: Mapping[str, str]) -> bool:
    """Whether JAX's own Cloud TPU detection knows this process's id and peers: on a TPU VM
    (libtpu installed) or a simulated one (JAX_FORCE_TPU_INIT), with the worker identity
    podmanager sets. Then `initialize` is a thin call of `jax.distributed.initialize`."""
    import importlib.util

    identity = "TPU_WORKER_ID" in env and "TPU_WORKER_HOSTNAMES" in env
    return identity and ("JAX_FORCE_TPU_INIT" in env or importlib.util.find_spec("libtpu") is not None)
