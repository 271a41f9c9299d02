"""Where podmanager keeps its files: `$PODMANAGER_HOME`, default `~/.podmanager`; the dry run's
simulated cloud keeps its own under `sim_home()`."""

from __future__ import annotations

import os
from pathlib import Path

from podmanager.core.errors import SpecError


def home() -> Path:
    # Absolute: the supervisors and hosts that read it run in other folders.
    path = Path(os.environ.get("PODMANAGER_HOME") or Path.home() / ".podmanager").expanduser().absolute()
    return private_dir(path)


SIM_HOME_ENV = "PODMANAGER_SIM_HOME"


def sim_home() -> Path:
    """The simulated cloud's folder: `$PODMANAGER_SIM_HOME`, else `default_sim_home()`. The
    emulator's records and saved state, the simulated buckets, the simulated VMs' records and disks
    live here, so a process with a home of its own (the dry run's controller VM) finds the project's
    emulator and the simulated hosts as the process that started them does."""
    return private_dir(sim_home_path())


def sim_home_path() -> Path:
    """Where `sim_home` is, not made: naming the simulated cloud (a `down` on Google Cloud) makes no folder."""
    found = os.environ.get(SIM_HOME_ENV)
    return (Path(found).expanduser() if found else default_sim_home()).absolute()


def default_sim_home() -> Path:
    """`$XDG_STATE_HOME/podmanager/sim`, else `~/.local/state/podmanager/sim`: one simulated cloud
    per user, as one Google Cloud project outlives any laptop's `$PODMANAGER_HOME`. Not inside the
    home: deleting the home (then `connect`, or `down -c NAME`) must leave the cloud, and with it the
    cluster's VMs and controller, as Google Cloud would. XDG's state folder: it is data that lasts
    but that no one would back up or sync (the XDG Base Directory spec's "state" data)."""
    state = os.environ.get("XDG_STATE_HOME")
    # The spec says a relative value is invalid and is to be ignored.
    base = Path(state) if state and os.path.isabs(state) else Path.home() / ".local" / "state"
    return base / "podmanager" / "sim"


def private_dir(path: Path) -> Path:
    """`path` as a folder only its owner may enter (0700), made if missing. The home holds the
    state store, tokens and secrets: a folder others cannot enter protects every file in it,
    whatever mode the file was made with (SQLite's, Ray's, a log's)."""
    if path in _private and path.is_dir():
        return path
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    status = path.stat()
    if status.st_mode & 0o077 and status.st_uid == os.getuid():
        os.chmod(path, 0o700)  # made by an older podmanager, or under a loose umask
    _private.add(path)
    return path


_private: set[Path] = set()  # folders this process made private (checked again if they vanish)


def cluster_dir(cluster: str) -> Path:
    """Per-cluster files: the Ray token, the head's and simulated hosts' pids, run logs."""
    path = cluster_path(cluster)
    path.mkdir(parents=True, exist_ok=True)
    return path


def sim_cluster_dir(cluster: str) -> Path:
    """A cluster's files kept by the simulated cloud (its simulated hosts' records), made if missing."""
    path = sim_home() / "clusters" / one_name(cluster, "cluster")
    path.mkdir(parents=True, exist_ok=True)
    return path


def sim_state_path(project: str) -> Path:
    return sim_home() / "sim" / f"{one_name(project, 'project')}.json"


def wheels_dir() -> Path:
    """Wheels of podmanager built for TPU VMs (`controller/wheel.py`), each named by its version."""
    path = home() / "wheels"
    path.mkdir(parents=True, exist_ok=True)
    return path


def locks_dir() -> Path:
    """The TPU VMs' environments as resolved once (`controller/boot_lock.py`), each named by what it resolved."""
    path = home() / "locks"
    path.mkdir(parents=True, exist_ok=True)
    return path


def storage_dir() -> Path:
    """The emulator's Cloud Storage: one folder per simulated bucket, an object at its name below it."""
    return sim_home() / "sim" / "storage"


def storage_object(bucket: str, name: str) -> Path:
    """Where the simulated object gs://bucket/name is kept. ValueError for a bucket or name that
    would lead out of the bucket's folder (the emulator serves these files to anyone asking)."""
    parts = name.split("/")
    if not bucket or "/" in bucket or bucket in (".", "..") or not name or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"gs://{bucket}/{name} is no object a simulated bucket keeps")
    return storage_dir() / bucket / Path(*parts)


def one_name(name: str, what: str) -> str:
    """`name` as one file name under $PODMANAGER_HOME. The spec checks every name first; this
    is the second line: a name from a flag, a record or an older version never leads out."""
    if not name or "/" in name or "\\" in name or ".." in name or "\0" in name or name.startswith("."):
        raise SpecError(f"{what}: {name!r} cannot name a file (it is empty, starts with '.', or holds '/' or '..'); "
                        "use lowercase letters, digits and '-'")
    return name


def cluster_path(cluster: str) -> Path:
    """Where `cluster_dir` is, not made: a reader's look at a cluster that does not exist leaves no folder."""
    return home() / "clusters" / one_name(cluster, "cluster")
