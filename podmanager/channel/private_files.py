"""Owner-only files for the channel's secrets (tokens, the controller's key, pinned certificates).

Written whole or not at all, created 0600 in a 0700 folder, so no other user can read them
even for a moment; read back only while still 0600, as ssh treats its keys: a token that others
could have read is no proof of being its owner."""

from __future__ import annotations

import os
import stat
import uuid
from pathlib import Path

from podmanager.channel.errors import ChannelCredentialError


def private_folder(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)  # made earlier, or under a loose umask
    return path


def write_private(path: Path, content: str | bytes) -> None:
    """Replace `path` with `content`, 0600, in one rename (a reader sees the old or the new)."""
    private_folder(path.parent)
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(content.encode() if isinstance(content, str) else content)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def read_private(path: Path, *, what: str, fix: str) -> str:
    """The text of an owner-only file. A missing file, or one that others may read, is a
    ChannelCredentialError naming the file, `what` it holds and `fix`."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        raise ChannelCredentialError(f"{what}: {path} does not exist", hint=fix) from None
    if mode & 0o077:
        raise ChannelCredentialError(
            f"{what}: {path} may be read by other users (mode {mode:04o}); it is not used",
            hint=f"Make it the owner's only ('chmod 600 {path}'), or if it may have been read: {fix}")
    return path.read_text()
