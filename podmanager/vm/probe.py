"""What a host agent checks on its machine: chips, who holds them, memory, disk.

Pure functions of the local machine, separate from the actor so they can be tested
(and extended) without Ray.
"""

from __future__ import annotations

import errno
import fcntl
import glob
import os
import time
from dataclasses import asdict, dataclass

import psutil

LIBTPU_LOCKFILE = "/tmp/libtpu_lockfile"


@dataclass(frozen=True)
class ProbeResult:
    alive: bool
    chips_expected: int
    chips_visible: int
    chips_held_by: str | None  # "pid 123 (python)" or "unknown process" when the libtpu lock is taken
    memory_free_bytes: int
    disk_free_bytes: int
    timestamp: float

    @property
    def healthy(self) -> bool:
        return self.alive and self.chips_visible >= self.chips_expected and self.chips_held_by is None

    @property
    def detail(self) -> str:
        problems = []
        if self.chips_visible < self.chips_expected:
            problems.append(f"{self.chips_visible} of {self.chips_expected} chips visible")
        if self.chips_held_by:
            problems.append(f"chips held by {self.chips_held_by} ({LIBTPU_LOCKFILE})")
        return "; ".join(problems) or "ok"

    def as_dict(self) -> dict:
        return asdict(self)


def visible_chips() -> int:
    """TPU chips this VM exposes: /dev/accel* (v2-v4) or /dev/vfio/<n> (v5e and later)."""
    accel = glob.glob("/dev/accel*")
    if accel:
        return len(accel)
    return len([p for p in glob.glob("/dev/vfio/*") if os.path.basename(p).isdigit()])


def lock_holder(lockfile: str = LIBTPU_LOCKFILE) -> str | None:
    """Who holds the libtpu lock (a stray process still owning the chips), or None."""
    if not os.path.exists(lockfile):
        return None
    try:
        fd = os.open(lockfile, os.O_RDWR)
    except OSError:
        return "unknown process (lockfile not accessible)"
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as busy:
        if busy.errno in (errno.EACCES, errno.EAGAIN):
            return _who_has_open(lockfile) or "unknown process"
        return None
    else:
        fcntl.lockf(fd, fcntl.LOCK_UN)
        return None  # a stale file from a process that is gone
    finally:
        os.close(fd)


def _who_has_open(path: str) -> str | None:
    for proc in psutil.process_iter(["pid", "name"]):
        try:
            if any(f.path == path for f in proc.open_files()):
                return f"pid {proc.info['pid']} ({proc.info['name']})"
        except psutil.Error:
            continue
    return None


def probe_host(chips_expected: int, *, simulated: bool) -> ProbeResult:
    """Simulated hosts share one machine: their chips are the configured count, no lock check."""
    return ProbeResult(
        alive=True,
        chips_expected=chips_expected,
        chips_visible=chips_expected if simulated else visible_chips(),
        chips_held_by=None if simulated else lock_holder(),
        memory_free_bytes=psutil.virtual_memory().available,
        disk_free_bytes=psutil.disk_usage("/").free,
        timestamp=time.time(),
    )
