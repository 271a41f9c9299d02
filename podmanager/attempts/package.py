"""A run's code as the controller keeps it: the zip packed where the user ran podmanager
(`code_zip.py`), in the run's own folder under its content's digest, for as long as the run
is unfinished.

The run's supervisor (next to the head, on this machine) is handed the digest, reads the zip
and hands its bytes to every host through Ray's object store; a supervisor started again on
a new head (`api/resume.py`) finds it here too. Nothing depends on the client's current
folder: the zip is all of the code there is.
"""

from __future__ import annotations

from pathlib import Path

from podmanager.core import paths
from podmanager.core.code_zip import PackedCode
from podmanager.core.files import write_atomic


def kept_folder(cluster: str, run_id: str) -> Path:
    """Where a run's code is kept on the controller while the run is unfinished."""
    return paths.cluster_dir(cluster) / "code" / run_id


def keep(code: PackedCode, cluster: str, run_id: str) -> None:
    """Keep the run's code as `<digest>.zip` in its folder."""
    folder = kept_folder(cluster, run_id)
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / f"{code.digest}.zip", code.data)


def kept_zip(cluster: str, run_id: str, digest: str) -> Path:
    """The kept zip of the run's code named `digest` (it may be gone: the caller reads it)."""
    return kept_folder(cluster, run_id) / f"{digest}.zip"


def kept_digest(cluster: str, run_id: str) -> str | None:
    """The digest of the code kept for the run, or None when none is kept."""
    folder = kept_folder(cluster, run_id)
    kept = sorted(folder.glob("*.zip")) if folder.is_dir() else []
    return kept[-1].stem if kept else None
