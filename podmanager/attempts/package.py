"""A run's code: the working dir, packed where the run is submitted and kept in the cluster.

Ray's runtime environments already do the hard parts: a content-addressed zip of a folder
(honouring .gitignore and .rayignore), stored in the cluster's GCS, and kept there as long
as a detached actor whose runtime environment names it lives. Their public entry points,
though, only package a local folder for a whole job (`ray.init(runtime_env=...)`), and a
podmanager client submits runs with different folders from one long-lived driver. So
`upload` calls the packaging functions that `ray.init` itself uses, and the run's
supervisor (a detached actor) is started with the package as its `working_dir`: Ray
downloads it onto the head node for the supervisor and deletes it from the GCS when the
run's supervisor is gone for good. Nothing depends on the client's current folder, or on
the client and the head sharing a disk.
"""

from __future__ import annotations

import contextlib
import fnmatch
import io
import logging
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from podmanager.core import paths
from podmanager.core.errors import SpecError

log = logging.getLogger(__name__)
# Ray's packaging speaks to whoever calls `ray.init(runtime_env=...)`, which a podmanager user
# never does: what it says goes nowhere, and what matters is said here in podmanager's terms.
class _Discard(logging.Logger):
    """A logger outside the logging tree that drops every record: whatever configures logging
    later (Ray resets loggers' propagation when it sets its own up) cannot route it anywhere."""

    def _log(self, *args: object, **kwargs: object) -> None:
        return


_RAY_LOG = _Discard(__name__ + ".ray")
_RAY_PACKAGING_LOGGER = "ray._private.runtime_env.packaging"

# Never shipped: version control, environments and caches (on top of .gitignore/.rayignore).
# Any other folder that is a Python environment is found by what it holds (`environment_folders`).
EXCLUDES = [".git", ".hg", ".svn", ".venv", "venv", "__pycache__", "node_modules", ".pytest_cache", ".mypy_cache",
            ".ruff_cache", "*.egg-info", ".ipynb_checkpoints"]
MAX_PACKAGE_BYTES = 64 << 20  # far below Ray's own limit: a clear error before a slow upload
LARGE_FILE_BYTES = 10 << 20  # a file this big shipped with every run is worth a word


@dataclass(frozen=True)
class CodePackage:
    """A working dir as the cluster holds it."""

    uri: str  # gcs://_ray_pkg_<content hash>.zip
    files: frozenset[str]  # the shipped file names, relative, with /
    size_bytes: int  # zipped


def upload(folder: str | Path, keep: Path | None = None) -> CodePackage:
    """Pack `folder` and store it in the connected Ray cluster (a no-op when a package with
    the same content is there already). Raises SpecError for a missing or too large folder.
    `keep`: a folder that gets a copy of the package, so that `restore` can store it again in
    a new head's GCS (the old one's is gone with it)."""
    from ray._private.runtime_env import packaging

    root = Path(folder).resolve()
    if not root.is_dir():
        raise SpecError(f"--working-dir: {root} is not a directory")
    excludes = EXCLUDES + [_anchored(path) for path in environment_folders(root)]
    with _ray_quiet():
        uri = packaging.get_uri_for_directory(str(root), include_gitignore=True, excludes=excludes)
    with tempfile.TemporaryDirectory(prefix="podmanager-pkg-") as scratch:
        zipped = Path(scratch) / "package.zip"
        files, size = pack(root, zipped, excludes)
        if size > MAX_PACKAGE_BYTES:
            raise SpecError(
                f"--working-dir: {root} packs to {size >> 20} MiB, more than the "
                f"{MAX_PACKAGE_BYTES >> 20} MiB shipped to the hosts",
                hint="Point --working-dir at the folder with your code only, or list data and checkpoints in "
                     ".gitignore (or .rayignore); keep them in a bucket.")
        # Held for a while so that the supervisor's runtime environment can pin it for good.
        with _ray_quiet():
            packaging.pin_runtime_env_uri(uri)
            if not packaging.package_exists(uri):
                packaging.upload_package_to_gcs(uri, zipped.read_bytes())
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(zipped, keep / _package_file(uri))
    return CodePackage(uri, files, size)


def kept_folder(cluster: str, run_id: str) -> Path:
    """Where a run's package is kept on the controller while the run is unfinished."""
    return paths.cluster_dir(cluster) / "code" / run_id


def _package_file(uri: str) -> str:
    return uri.split("://", 1)[1]  # gcs://_ray_pkg_<hash>.zip -> _ray_pkg_<hash>.zip


def restore(keep: Path) -> str | None:
    """Store the package kept in `keep` (by `upload`) in the connected cluster again, under its
    old URI; the URI, or None when nothing was kept."""
    from ray._private.runtime_env import packaging

    kept = sorted(keep.glob("_ray_pkg_*.zip")) if keep.is_dir() else []
    if not kept:
        return None
    uri = f"gcs://{kept[-1].name}"
    with _ray_quiet():
        packaging.pin_runtime_env_uri(uri)
        if not packaging.package_exists(uri):
            packaging.upload_package_to_gcs(uri, kept[-1].read_bytes())
    return uri


def pack(root: Path, zipped: Path, excludes: list[str]) -> tuple[frozenset[str], int]:
    """Zip `root` into `zipped` as Ray's packaging does (its `.gitignore`/`.rayignore` rules,
    `excludes`), saying nothing in Ray's terms; a large file is named in podmanager's. The
    shipped file names and the zip's size."""
    from ray._private.runtime_env import packaging

    with _ray_quiet():
        packaging.create_package(str(root), zipped, include_gitignore=True, excludes=excludes, logger=_RAY_LOG)
    with zipfile.ZipFile(zipped) as archive:
        entries = [entry for entry in archive.infolist() if not entry.is_dir()]
    for entry in entries:
        if entry.file_size >= LARGE_FILE_BYTES:
            log.warning("%s is %d MiB and goes to every host with each run: if the program does not need it, "
                        "list it in %s/.gitignore (or .rayignore)", entry.filename, entry.file_size >> 20, root)
    return frozenset(entry.filename for entry in entries), zipped.stat().st_size


def environment_folders(root: Path) -> list[str]:
    """The folders under `root` (relative, with /) that are Python environments, whatever their
    name: a virtualenv (it has `pyvenv.cfg`) or a conda environment (`conda-meta/`)."""
    found = []
    for here, dirs, files in os.walk(root):  # symlinked folders are not followed, as when packing
        relative = Path(here).relative_to(root)
        if relative != Path(".") and ("pyvenv.cfg" in files or "conda-meta" in dirs):
            found.append(relative.as_posix())
            dirs.clear()
            continue
        dirs[:] = [d for d in dirs if not any(fnmatch.fnmatch(d, pattern) for pattern in EXCLUDES)]
    return found


def _anchored(relative: str) -> str:
    """A .gitignore pattern for exactly this folder of the root."""
    return "/" + "".join("\\" + ch if ch in "\\*?[" else ch for ch in relative)


@contextlib.contextmanager
def _ray_quiet() -> Iterator[None]:
    """Ray's packaging's own messages (logged where no logger can be passed) kept out."""
    ray_log = logging.getLogger(_RAY_PACKAGING_LOGGER)
    level = ray_log.level
    ray_log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        ray_log.setLevel(level)


def zip_folder(folder: Path) -> bytes:
    """Every file of `folder` as one zip: the run's code as Ray unpacked it for the
    supervisor, already filtered and size-checked by `upload`, for the hosts."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for file in sorted(p for p in folder.rglob("*") if p.is_file()):
            archive.write(file, file.relative_to(folder))
    return buffer.getvalue()
