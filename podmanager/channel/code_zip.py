"""A run's working dir packed on the client, to ship over the channel without loading Ray.

The same files `attempts/package.py` ships (it runs again on the controller, with Ray's own
packaging, over what arrives): every file but version control, environments and caches
(`package.EXCLUDES`, and any folder holding a Python environment), and what a `.gitignore` or
`.rayignore` in the folder or below leaves out, and podmanager's own home (its tokens and keys)
should it be inside. Filtering here keeps a large ignored data
folder on the laptop instead of sending it to be dropped there."""

from __future__ import annotations

import fnmatch
import io
import os
import zipfile
from pathlib import Path

import pathspec

from podmanager.attempts.package import EXCLUDES, MAX_PACKAGE_BYTES
from podmanager.core import paths
from podmanager.core.errors import SpecError

IGNORE_FILES = (".gitignore", ".rayignore")


def zip_working_dir(folder: str | Path) -> bytes:
    """The working dir's shipped files as one zip; SpecError naming `--working-dir` for a
    missing folder or one that packs to more than the hosts are sent."""
    root = Path(folder).resolve()
    if not root.is_dir():
        raise SpecError(f"--working-dir: {root} is not a directory")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in shipped_files(root):
            archive.write(path, path.relative_to(root).as_posix())
            if buffer.tell() > MAX_PACKAGE_BYTES:
                raise SpecError(
                    f"--working-dir: {root} packs to more than the {MAX_PACKAGE_BYTES >> 20} MiB shipped to the hosts",
                    hint="Point --working-dir at the folder with your code only, or list data and checkpoints in "
                         ".gitignore (or .rayignore); keep them in a bucket.")
    return buffer.getvalue()


def shipped_files(root: Path) -> list[Path]:
    """Every file under `root` that is shipped, in a stable order."""
    rules: list[tuple[Path, pathspec.GitIgnoreSpec]] = []  # (the folder an ignore file is in, its rules)
    found: list[Path] = []
    home = paths.home().resolve()  # podmanager's own folder (tokens, keys) never leaves this machine
    for here, dirs, files in os.walk(root):  # symlinked folders are not followed, as when packing
        place = Path(here)
        lines = [line for name in IGNORE_FILES if (place / name).is_file()
                 for line in (place / name).read_text(errors="replace").splitlines()]
        if lines:
            rules.append((place, pathspec.GitIgnoreSpec.from_lines(lines)))
        kept_dirs = []
        for name in sorted(dirs):
            folder = place / name
            if (any(fnmatch.fnmatch(name, pattern) for pattern in EXCLUDES) or _is_environment(folder)
                    or folder.resolve() == home):
                continue
            if not _ignored(folder, rules, is_dir=True):
                kept_dirs.append(name)
        dirs[:] = kept_dirs
        found.extend(place / name for name in sorted(files)
                     if not any(fnmatch.fnmatch(name, pattern) for pattern in EXCLUDES)
                     and not _ignored(place / name, rules, is_dir=False))
    return found


def _is_environment(folder: Path) -> bool:
    return (folder / "pyvenv.cfg").is_file() or (folder / "conda-meta").is_dir()


def _ignored(path: Path, rules: list[tuple[Path, pathspec.GitIgnoreSpec]], *, is_dir: bool) -> bool:
    for base, spec in rules:
        if base == path or base not in path.parents:
            continue
        relative = path.relative_to(base).as_posix() + ("/" if is_dir else "")
        if spec.match_file(relative):
            return True
    return False
