"""Who owns a local machine podmanager starts, and where its folders are: names every side
shares (the processes' owner tag, their temp folders under `paths.machines_dir()`), so the laptop
removes a dry run's VM folder without the process tools of `vm/procs.py`."""

from __future__ import annotations

import contextlib
import hashlib
import os

from podmanager.core import paths
from podmanager.core.errors import UnsafeFolderError


def owner(cluster: str) -> str:
    """The identity of `cluster`'s local processes in this state folder."""
    return f"{cluster}@{paths.home().resolve()}"


def sim_owner(cluster: str) -> str:
    """The identity of `cluster`'s simulated VMs: the simulated cloud's folder's, not the home of
    whoever asked for them (`paths.sim_home`; the same as `owner` unless PODMANAGER_SIM_HOME is set)."""
    return f"{cluster}@{paths.sim_home_path().resolve()}"


def owner_temp_dir(cluster: str) -> str:
    """The folder under which every local machine of `cluster` keeps Ray's temp dir, so that
    `down` removes them all without a record of each."""
    return temp_dir_of(owner(cluster))


def temp_dir_of(owner: str) -> str:
    """The temp folder of `owner`'s machines, in this user's own `paths.machines_dir()`. Short
    (8 hex digits: see `machines_dir` for the 107-byte limit on Ray's socket paths)."""
    return f"{paths.machines_dir()}/{hashlib.sha1(owner.encode()).hexdigest()[:8]}"


def remove_vms_folder(cluster: str) -> None:
    """Remove the folder of `cluster`'s simulated VMs once none is left in it. Each VM removes its
    own root when it goes (`emulator/vm_lease.py`, `emulator/instance_vms.py`), and the folder may
    still hold the VM that asks (a controller VM's own `down`): so only an empty one goes."""
    with contextlib.suppress(UnsafeFolderError, OSError):  # not ours; missing, or not empty yet
        os.rmdir(temp_dir_of(sim_owner(cluster)))
