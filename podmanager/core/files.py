"""Writing a file that other processes read while it changes: whole or not at all."""

from __future__ import annotations

import os
import uuid
from pathlib import Path


def write_atomic(path: Path, content: str | bytes) -> None:
    """Replace `path`'s content with `content` (text as UTF-8) so that a reader, in this process
    or another, sees the old content or the new, never part of it: the content goes to a
    temporary file beside `path` (same folder, so the same file system) that then takes its
    name in one rename.

    The temporary name is unique per call, so concurrent writers of one file do not write
    into each other's temporary file: the last rename wins, whole. A failed write removes it.

    No fsync: what this guards against is readers and crashed processes, not a machine losing
    power (the state store, the one durable record, is SQLite's, which syncs itself); the
    files written here are snapshots or copies a later write or a rebuild restores."""
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        with open(temporary, "xb") as handle:
            handle.write(content.encode() if isinstance(content, str) else content)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
