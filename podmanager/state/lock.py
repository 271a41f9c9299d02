"""One lock per cluster for the verbs that change its slices: `up`, `down` and a run's
recovery (deleting and creating slices). They take turns: the second waits for the first,
says so, and then finds the first one's work done.

The lock is an `fcntl.flock` on `clusters/<name>/lock`. The kernel drops it when its holder
exits, however it exits, so a crashed or killed `up` never leaves the cluster locked. The
holder writes who it is into the file, for the message of whoever waits. Within a process
the lock is re-entrant for the thread that holds it (a recovery that heals runs `up`'s
steps), and other threads wait for it as other processes do.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator

from podmanager.core import paths
from podmanager.core.clock import RealClock, poll_until
from podmanager.core.errors import TimeoutExceededError

LOCK_FILE = "lock"
POLL_S = 0.1
NOTE_WAIT_S = 1.0  # how long a holder may take to write who it is


@dataclass(frozen=True)
class Holder:
    """Who holds a cluster's lock."""

    pid: int
    verb: str  # what it does: "up", "down", "recovery for run R"
    since: float  # unix time it took the lock

    def describe(self, cluster: str) -> str:
        return f"another podmanager {self.verb} of {cluster} (pid {self.pid})"


WaitCallback = Callable[[Holder | None], None]


@dataclass
class _InProcess:
    """The lock as this process holds it: one thread at a time, re-entrant for that thread."""

    turn: threading.Lock
    owner: int | None = None
    depth: int = 0
    holder: Holder | None = None


_registry: dict[Path, _InProcess] = {}
_registry_guard = threading.Lock()


def lock_path(cluster: str) -> Path:
    return paths.cluster_dir(cluster) / LOCK_FILE


def holder_of(cluster: str) -> Holder | None:
    """Who holds the lock now, as its holder wrote it (None if free or not yet written)."""
    return _read_holder(lock_path(cluster))


@contextlib.contextmanager
def cluster_lock(cluster: str, verb: str, *, timeout_s: float, on_wait: WaitCallback | None = None) -> Iterator[None]:
    """Hold the cluster's lock for the block. If someone else holds it, `on_wait(holder)` is
    called once (holder None when it cannot be told who) and the lock is waited for, up to
    `timeout_s` (real time: a test's manual clock must not make it give up at once)."""
    path = lock_path(cluster)
    with _registry_guard:
        local = _registry.setdefault(path, _InProcess(threading.Lock()))
    me = threading.get_ident()
    if local.owner == me:  # re-entered by the thread that holds it
        local.depth += 1
        try:
            yield
        finally:
            local.depth -= 1
        return
    deadline = time.monotonic() + timeout_s
    told = False
    if not local.turn.acquire(blocking=False):
        told = _tell(on_wait, local.holder)
        if not local.turn.acquire(timeout=max(0.0, timeout_s)):
            raise _timed_out(cluster, verb, local.holder, timeout_s)
    try:
        handle = open(path, "a+")
        try:
            if not _try_flock(handle):
                known = _holder_or_lock(handle, path)
                if known is not True:
                    if not told:
                        told = _tell(on_wait, known)
                    poll_until(lambda: _try_flock(handle), timeout_s=max(0.0, deadline - time.monotonic()),
                               interval_s=POLL_S, clock=RealClock(),
                               on_timeout=lambda: _timed_out(cluster, verb, _read_holder(path), timeout_s))
            holder = Holder(os.getpid(), verb, time.time())
            _write_holder(handle, holder)
            local.owner, local.depth, local.holder = me, 1, holder
            try:
                yield
            finally:
                local.owner, local.depth, local.holder = None, 0, None
                handle.truncate(0)  # nobody holds it: a waiter must not read a stale holder
                handle.flush()
                fcntl.flock(handle, fcntl.LOCK_UN)
        finally:
            handle.close()
    finally:
        local.turn.release()


def _try_flock(handle) -> bool:  # type: ignore[no-untyped-def]
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _holder_or_lock(handle, path: Path) -> Holder | bool | None:  # type: ignore[no-untyped-def]
    """Who holds the lock, or True if it came free meanwhile. A holder writes its note just
    after it takes the lock: give it a moment, then say "another process" (None)."""

    def known() -> Holder | bool | None:
        return True if _try_flock(handle) else _read_holder(path)

    try:
        return poll_until(known, timeout_s=NOTE_WAIT_S, interval_s=0.01, clock=RealClock())
    except TimeoutExceededError:
        return None


def _tell(on_wait: WaitCallback | None, holder: Holder | None) -> bool:
    if on_wait is not None:
        on_wait(holder)
    return True


def _write_holder(handle, holder: Holder) -> None:  # type: ignore[no-untyped-def]
    handle.truncate(0)
    handle.write(json.dumps(asdict(holder)))
    handle.flush()


def _read_holder(path: Path) -> Holder | None:
    try:
        data = json.loads(path.read_text() or "null")
        return Holder(int(data["pid"]), str(data["verb"]), float(data["since"])) if data else None
    except (OSError, ValueError, KeyError, TypeError):
        return None  # not written yet, or being rewritten: the caller says "another process"


def _timed_out(cluster: str, verb: str, holder: Holder | None, timeout_s: float) -> TimeoutExceededError:
    who = holder.describe(cluster) if holder else f"another podmanager process working on {cluster}"
    return TimeoutExceededError(f"{verb}: {who} still holds the cluster's lock after {timeout_s:.0f}s",
                                hint="Wait for it to finish, then run the command again.")
