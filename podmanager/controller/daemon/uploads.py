"""The working dirs clients send to the controller over the channel, kept as the zips they
are (`$PODMANAGER_HOME/uploads/<digest>.zip`, never unpacked here) between the client's send
and its submit, which names the zip by its digest.

A submitted run keeps its own copy (`attempts/package.py`), so no run needs an upload once
its submit is over; the submit follows its send at once, so an upload unused for
`UPLOAD_KEEP_S` is removed, at the next send or submit."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from podmanager.channel.private_files import write_private
from podmanager.core import code_zip, paths
from podmanager.core.code_zip import PackedCode
from podmanager.core.errors import PodmanagerError, SpecError

UPLOADS = "uploads"
UPLOAD_KEEP_S = 15 * 60.0


def uploads_dir() -> Path:
    return paths.private_dir(paths.home() / UPLOADS)


def keep(zipped: bytes) -> PackedCode:
    """Check a client's zip (SpecError, exit 2, if it is no zip of a working dir within the
    limits) and keep it by its digest; sent again, it is kept once (and kept longer)."""
    code = code_zip.received(zipped)
    path = upload_path(code.digest)
    if path.is_file():
        os.utime(path)
    else:
        write_private(path, code.data)
    sweep()
    return code


def take(digest: str) -> tuple[PackedCode, Path]:
    """The upload named `digest` for a submit, and where it is kept."""
    path = upload_path(digest)
    try:
        code = code_zip.received(path.read_bytes())
    except FileNotFoundError:
        raise PodmanagerError(f"--working-dir: the controller holds no code {digest[:12]}",
                              hint="Send it again: the client uploads its working dir first.") from None
    if code.digest != digest:
        raise PodmanagerError(f"--working-dir: the code kept as {digest[:12]} has changed on the controller",
                              hint="Send it again: the client uploads its working dir first.")
    sweep()
    return code, path


def upload_path(digest: str) -> Path:
    if len(digest) != 64 or any(ch not in "0123456789abcdef" for ch in digest):
        raise SpecError(f"code: {digest!r} is not the digest of an upload (64 hex digits)")
    return uploads_dir() / f"{digest}.zip"


def sweep(now: float | None = None) -> list[str]:
    """Remove every upload (and anything an older controller left there: unpacked folders)
    unused for `UPLOAD_KEEP_S`; the names removed."""
    now = time.time() if now is None else now
    removed = []
    for entry in sorted(uploads_dir().iterdir()):
        try:
            if now - entry.lstat().st_mtime < UPLOAD_KEEP_S:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        except FileNotFoundError:
            continue  # removed by a sweep running beside this one
        removed.append(entry.name)
    return removed
