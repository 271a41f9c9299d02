"""A deleted cluster's history on this machine. Before `down` deletes a controller VM (whose
disk holds the cluster's records), the controller's bundle of them (`api/history_bundle.py`)
is fetched over the channel and unpacked under `$PODMANAGER_HOME/clusters/<name>/history/`,
owner-only; `podmanager dashboard -c NAME` then serves the page from that copy, read-only,
saying when the cluster was deleted. A later `down` of a cluster of the same name replaces it."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import time
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from podmanager.core import paths
from podmanager.core.events import EventKind
from podmanager.core.paths import PROGRESS_FILE, RUNS

DATABASE = "state.db"  # the bundle's copy of the cluster's records (api/history_bundle.py makes it)

if TYPE_CHECKING:
    from podmanager.client.pinned import ClientCredentials

HISTORY = "history"
NOTE = "kept.json"
FETCH_TIMEOUT_S = 300.0
# The only names a bundle may hold: the database and each run's series (nothing outside the folder).
_MEMBER = re.compile(rf"{re.escape(DATABASE)}|{RUNS}/[A-Za-z0-9][A-Za-z0-9._-]*/{re.escape(PROGRESS_FILE)}")


@dataclass(frozen=True)
class KeptHistory:
    folder: Path
    deleted_at: float  # when `down` had deleted the cluster's slices and runs (the copy was made then)

    @property
    def database(self) -> Path:
        return self.folder / DATABASE

    @property
    def runs_root(self) -> Path:
        return self.folder / RUNS

    def note(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.deleted_at))
        return f"history: cluster deleted at {when}; this copy of its records was kept on this machine by `down`"


def folder(name: str) -> Path:
    return paths.cluster_path(name) / HISTORY


def kept(name: str) -> KeptHistory | None:
    """The copy of cluster `name`'s history here, if `down` kept one."""
    try:
        note = json.loads((folder(name) / NOTE).read_text())
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return None
    if not (folder(name) / DATABASE).is_file():
        return None
    return KeptHistory(folder(name), float(note["deleted_at"]))


def keep(name: str, data: bytes, *, deleted_at: float) -> KeptHistory:
    """Unpack a bundle as cluster `name`'s history here, replacing an earlier one whole."""
    target = folder(name)
    fresh = paths.private_dir(target.with_name(f".{HISTORY}-{os.getpid()}"))
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for member in archive.namelist():
                if not _MEMBER.fullmatch(member):
                    raise ValueError(f"the controller's history holds an unexpected file {member!r}")
                path = fresh / member
                paths.private_dir(path.parent)
                _write_private(path, archive.read(member))
        _write_private(fresh / NOTE, json.dumps({"deleted_at": deleted_at, "copied_at": time.time()}).encode())
        old = target.with_name(f".{HISTORY}-old-{os.getpid()}")
        if target.exists():
            target.rename(old)
        fresh.rename(target)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(fresh, ignore_errors=True)
    return KeptHistory(target, deleted_at)


def fetch(credentials: ClientCredentials) -> bytes:
    """The controller's bundle, over the channel (its pinned certificate, the cluster's token)."""
    from podmanager.channel.page_server import PAGE_PREFIX

    address = credentials.address
    url = (f"https://{address.host}:{address.port}{PAGE_PREFIX}/"
           f"{urllib.parse.quote(credentials.cluster, safe='')}/api/history")
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {credentials.token}"})
    with urllib.request.urlopen(request, context=credentials.tls_context(), timeout=FETCH_TIMEOUT_S) as reply:
        return reply.read()


def keep_before_delete(name: str, say: Callable[[EventKind, str], None]) -> KeptHistory | None:
    """Fetch and keep the history of cluster `name` (its controller has torn it down; its VM is
    next). Never stops `down`: a failure is said and the delete goes on."""
    from podmanager.client import pinned

    try:
        found = keep(name, fetch(pinned.load(name)), deleted_at=time.time())
    except Exception as error:  # noqa: BLE001 - the history is for people; the delete must go on
        say(EventKind.WARNING, f"the history of {name} could not be kept on this machine ({error}); "
                               "its page will not be readable after down")
        return None
    say(EventKind.HISTORY_KEPT, f"kept the history of {name} in {found.folder}: 'podmanager dashboard -c {name}' "
                                "shows it after down")
    return found


def _write_private(path: Path, content: bytes) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(content)
