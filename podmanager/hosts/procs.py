"""Process groups of Ray processes that podmanager started, recorded on disk.

`ray start` daemonizes GCS, raylet, agents and log monitor, and the raylet forks
workers (each in a process group of its own); all of them stay in the *session* of
the process we launched with `start_new_session=True`, whose id is that process's pid.
Recording that id in a small JSON file lets any later process (`down`, a test
teardown, a new CLI after a crash) find and kill the whole "machine", without a broad
`ray stop` that would also hit clusters podmanager does not own. (The JSON key is
"pgid": the launched process leads both its session and its group.)
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import psutil

# A group is only killed when one of its members looks like one of these: a guard
# against a recorded id that has since been reused by an unrelated process group.
_OURS = ("ray", "raylet", "gcs_server", "podmanager")


def write_record(path: Path, **fields: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(fields))
    os.replace(tmp, path)


def read_record(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def group_members(pgid: int) -> list[psutil.Process]:
    """Live processes of the session `pgid` (zombies excluded)."""
    members = []
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                members.append(proc)
        except (ProcessLookupError, psutil.Error):
            continue
    return members


def _looks_like_ours(members: list[psutil.Process]) -> bool:
    for proc in members:
        try:
            text = " ".join([proc.name(), *proc.cmdline()]).lower()
        except psutil.Error:
            continue
        if any(marker in text for marker in _OURS):
            return True
    return False


def group_alive(pgid: int) -> bool:
    members = group_members(pgid)
    return bool(members) and _looks_like_ours(members)


def kill_group(pgid: int, *, grace_s: float = 0.0, wait_s: float = 5.0) -> bool:
    """SIGTERM (if `grace_s`), then SIGKILL every member of the group; True if any existed."""
    members = group_members(pgid)
    if not members or not _looks_like_ours(members):
        return False
    if grace_s > 0:
        _signal_group(pgid, signal.SIGTERM)
        psutil.wait_procs(members, timeout=grace_s)
    _signal_group(pgid, signal.SIGKILL)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and group_members(pgid):
        time.sleep(0.05)
    return True


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    for proc in group_members(pgid):
        try:
            proc.send_signal(sig)
        except psutil.Error:
            pass
