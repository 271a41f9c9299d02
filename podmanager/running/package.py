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

import io
import logging
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from podmanager.core import paths
from podmanager.core.errors import SpecError

# Ray's packaging logs every file it skips at INFO through the logger it is given: ours stays quiet.
log = logging.getLogger(__name__)

# Never shipped: version control, environments and caches (on top of .gitignore/.rayignore).
EXCLUDES = [".git", ".hg", ".svn", ".venv", "venv", "__pycache__", "node_modules", ".pytest_cache", ".mypy_cache",
            ".ruff_cache", "*.egg-info", ".ipynb_checkpoints"]
MAX_PACKAGE_BYTES = 64 << 20  # far below Ray's own limit: a clear error before a slow upload


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
    uri = packaging.get_uri_for_directory(str(root), include_gitignore=True, excludes=EXCLUDES)
    with tempfile.TemporaryDirectory(prefix="podmanager-pkg-") as scratch:
        zipped = Path(scratch) / "package.zip"
        packaging.create_package(str(root), zipped, include_gitignore=True, excludes=EXCLUDES, logger=log)
        size = zipped.stat().st_size
        if size > MAX_PACKAGE_BYTES:
            raise SpecError(
                f"--working-dir: {root} packs to {size >> 20} MiB, more than the "
                f"{MAX_PACKAGE_BYTES >> 20} MiB shipped to the hosts",
                hint="Point --working-dir at the folder with your code only, or list data and checkpoints in "
                     ".gitignore (or .rayignore); keep them in a bucket.")
        with zipfile.ZipFile(zipped) as archive:
            files = frozenset(name for name in archive.namelist() if not name.endswith("/"))
        # Held for a while so that the supervisor's runtime environment can pin it for good.
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
    packaging.pin_runtime_env_uri(uri)
    if not packaging.package_exists(uri):
        packaging.upload_package_to_gcs(uri, kept[-1].read_bytes())
    return uri



def zip_folder(folder: Path) -> bytes:
    """Every file of `folder` as one zip: the run's code as Ray unpacked it for the
    supervisor, already filtered and size-checked by `upload`, for the hosts."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for file in sorted(p for p in folder.rglob("*") if p.is_file()):
            archive.write(file, file.relative_to(folder))
    return buffer.getvalue()
