"""Atomic, periodic checkpoints of a pytree with orbax-checkpoint."""

from __future__ import annotations

import os
import re
from typing import Any

# `gs://bucket/ck`, `s3://...`, `file:///...`: storage every host reaches by URL.
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(directory: str) -> bool:
    """True for `scheme://...` (kept as is); False for a path on this machine's disk."""
    return bool(_URL.match(directory))


def resolve_directory(directory: str | os.PathLike[str]) -> str:
    """A URL unchanged (abspath would turn `gs://b/ck` into `./gs:/b/ck` on each host's
    disk); a local path made absolute, so the program's later `chdir`s do not move it."""
    text = os.fspath(directory)
    return text if is_url(text) else os.path.abspath(text)


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
    A URL (``gs://bucket/ck``) is kept as is and must be storage every host
    shares; a local path is made absolute.
    ``every_n_steps=0`` disables periodic saves; ``force=True`` still saves.
    ``read_only=True`` (a service reading a training run's checkpoints) never writes, creates
    or cleans up anything: the trainer's half-written step is its own.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        every_n_steps: int = 0,
        *,
        max_to_keep: int | None = 3,
        read_only: bool = False,
    ) -> None:
        if every_n_steps < 0:
            raise ValueError(f"every_n_steps must be >= 0, got {every_n_steps}")
        directory = directory or os.environ.get("PODMANAGER_CHECKPOINT_DIR") or None
        self.directory = resolve_directory(directory) if directory else None
        self.every_n_steps = 0 if read_only else every_n_steps
        self._manager = None
        if self.directory is not None and not is_url(self.directory) and not read_only:
            # Every process fails here, at once, on a folder it cannot use: orbax would fail on
            # the primary host only, with the others waiting for it in a barrier.
            os.makedirs(self.directory, exist_ok=True)
            if not os.access(self.directory, os.W_OK):
                raise PermissionError(f"checkpoint dir {self.directory} is not writable")
        if self.directory is not None:
            import orbax.checkpoint as ocp

            options = ocp.CheckpointManagerOptions(
                max_to_keep=max_to_keep,
                create=not read_only,
                read_only=read_only,
                # Remove leftovers of saves that crashed before finalizing (a writer's job only:
                # a reader would delete the step a live trainer is writing).
                cleanup_tmp_directories=not read_only,
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
        if saved:  # final now: the run's timeline marks it (through this process's progress file)
            from podmanager.runtime.progress import note_checkpoint

            note_checkpoint(step)
        return bool(saved)

    def restore_latest(self, template_pytree: Any) -> tuple[int, Any] | None:
        """Restore the newest complete checkpoint into ``template_pytree``'s layout.

        The template gives structure, shapes, dtypes and shardings (concrete
        arrays or ``jax.ShapeDtypeStruct``). Returns ``(step, pytree)`` or None.
        """
        step = self.latest_step()
        if step is None:
            return None
        return step, self.restore(step, template_pytree)

    def restore(self, step: int, template_pytree: Any) -> Any:
        """Restore checkpoint ``step`` (every process the same step) into the template's layout."""
        if self._manager is None:
            raise ValueError("no checkpoint dir: give one, or set PODMANAGER_CHECKPOINT_DIR")
        import orbax.checkpoint as ocp

        self._manager.reload()
        return self._manager.restore(step, args=ocp.args.StandardRestore(_abstract(template_pytree)))

    def close(self) -> None:
        if self._manager is not None:
            self._manager.wait_until_finished()
            self._manager.close()
            self._manager = None

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def latest_complete_step(directory: str) -> int | None:
    """The newest finalized checkpoint step in ``directory``, read by one process alone (a
    CheckpointManager would wait for the others in a barrier); None if there is none."""
    from orbax.checkpoint import utils

    return max(utils.checkpoint_steps(resolve_directory(directory)), default=None)
