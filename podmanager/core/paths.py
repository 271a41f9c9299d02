"""Where podmanager keeps its files: `$PODMANAGER_HOME`, default `~/.podmanager`; the dry run's
simulated cloud keeps its own under `sim_home()`; the local machines it starts (Ray heads,
simulated VMs) under `machines_dir()`."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from podmanager.core.errors import SpecError, UnsafeFolderError


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
    whatever mode the file was made with (SQLite's, Ray's, a log's). A folder of another user's is
    refused (`UnsafeFolderError`): what it holds may be theirs. A link is followed here: the home
    is a place its user chose (`machine_folder` is for places others may write to)."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    status = path.stat()
    if status.st_uid != os.geteuid():
        raise _unsafe(path, f"belongs to uid {status.st_uid}, not to you (uid {os.geteuid()})")
    if status.st_mode & 0o077:
        os.chmod(path, 0o700)  # made by an older podmanager, or under a loose umask
    return path


# Where `machines_dir` is made: "/tmp", not $TMPDIR, which a simulated VM sets to its own disk.
MACHINES_PARENT = Path("/tmp")


def machines_dir() -> Path:
    """`/tmp/pm-<uid>`: every local machine podmanager starts (a Ray head's temp dir, every
    simulated VM's root folder) lives in one folder of this user's, per cluster (`vm/procs.py`).

    Why here. It must be found again from the user alone (`down` after the home is lost), and it
    must be short: Ray makes Unix sockets inside its temp dir, and a socket's path holds at most
    107 bytes. Measured (Ray 2.60): the longest is the head's `<temp
    dir>/session_<date>_<time>_<usec>_<pid>/sockets/dash_MetricsHead`, 68 bytes past its temp dir
    with a 7-digit pid; a worker's longest is `.../sockets/plasma_store`, 64. A simulated TPU VM's
    Ray temp dir is `<this>/<8 hex>/<8 hex>/tmp/ray` (this + 26 + 64), the dry run's controller VM's
    head's `<this>/<8 hex>/<8 hex>/ray` (this + 22 + 68), a local head's `<this>/<8 hex>/head` (this
    + 14 + 68): so this may be 17 bytes long, `/tmp/pm-` and a uid of up to 9 digits. The home can be
    any length, and $XDG_RUNTIME_DIR (`/run/user/<uid>`, 5 bytes longer, a small tmpfs that Ray's
    logs and spilled objects would fill, unset under cron or ssh without a login session) is neither
    short enough nor always there.

    Why it is checked. /tmp is everyone's: another user who makes this folder first would own
    every Ray socket and every simulated VM's disk in it (and the programs a VM runs as its owner).
    `machine_folder` refuses a folder that is a link, another user's or open to others."""
    return machine_folder(MACHINES_PARENT / f"pm-{os.geteuid()}")


def machine_folder(path: Path) -> Path:
    """`path` made owner-only (0700) if missing, or refused (`UnsafeFolderError`) unless it is a
    folder of this user's that only they may enter: not a link (lstat, so a link is never
    followed), owned by this user, mode 0700. For a folder in a place others may write to (/tmp),
    whose name anyone can compute: never adopt one another user made first."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    status = os.lstat(path)
    if stat.S_ISLNK(status.st_mode):
        raise _unsafe(path, f"is a link (to {os.readlink(path)})")
    if not stat.S_ISDIR(status.st_mode):
        raise _unsafe(path, "is not a folder")
    if status.st_uid != os.geteuid():
        raise _unsafe(path, f"belongs to uid {status.st_uid}, not to you (uid {os.geteuid()})")
    if stat.S_IMODE(status.st_mode) != 0o700:
        raise _unsafe(path, f"has mode {stat.S_IMODE(status.st_mode):o}, not 700: others may have put files in it")
    return path


def _unsafe(path: Path, problem: str) -> UnsafeFolderError:
    return UnsafeFolderError(
        f"{path} {problem}; podmanager keeps its files (Ray's sockets, simulated VMs' disks, the state store) "
        "only in folders no one else may enter, and will not use it",
        hint=f"If it is not yours, ask its owner or an administrator to remove it; if it is, remove it "
             f"(rm -rf {path}: stop the clusters that use it first) and podmanager makes it again.")


# A run's folder in its cluster's dir (`attempts/logs.py::RunFolder`): named here, where the
# user's machine reads a kept history's copy of them too (`client/kept_history.py`).
RUNS = "runs"
PROGRESS_FILE = "progress.jsonl"  # the run's steps and metrics over time, as its supervisor saw them


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
