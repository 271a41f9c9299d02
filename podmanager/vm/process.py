"""One workload process on one host: start it in its own process group, keep its output in
a log file, report its exit, and stop it (SIGTERM, a grace period, then SIGKILL). Once it has
exited, however it ended, nothing it started is left: on a TPU VM a leftover child would hold
the chips the next run needs.

The host agent owns one of these per run. It is plain Python so it is tested without Ray.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psutil

from podmanager.runtime.contract import ProgressRecord

# Every process of one workload process's tree carries this tag in its environment (inherited),
# so a descendant that left the process group and session (`setsid`, a daemon's double fork)
# is still found when the program has exited.
WORKLOAD_TAG_ENV = "PODMANAGER_WORKLOAD_TAG"


@dataclass(frozen=True)
class ProcessStatus:
    pid: int
    running: bool
    exit_code: int | None


class WorkloadProcess:
    """A child process whose stdout and stderr go, merged and line by line, to `log_path`."""

    def __init__(self, argv: list[str], *, env: dict[str, str], cwd: str | None, log_path: Path):
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "wb")
        self.tag = uuid.uuid4().hex
        self._left_ended = False
        self._terminated = False  # SIGTERM sent (a notice): the program is checkpointing and exiting
        # Its own process group, so the whole tree (JAX may fork helpers) is signalled as one
        # and a Ctrl-C at a terminal never reaches it directly.
        self._popen = subprocess.Popen(
            argv, env={**env, WORKLOAD_TAG_ENV: self.tag}, cwd=cwd, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            process_group=0,
        )
        # Ray runs its workers (the agent among them) at nice 15 so that its daemons stay
        # responsive; the program must not inherit that, or it trains ~20% slower whenever
        # anything else wants the CPU. Lowering it needs privilege (root on a TPU VM).
        try:
            os.setpriority(os.PRIO_PROCESS, self._popen.pid, 0)
        except PermissionError:
            pass

    @property
    def pid(self) -> int:
        return self._popen.pid

    def status(self) -> ProcessStatus:
        code = self._exited(self._popen.poll())
        return ProcessStatus(self.pid, code is None, code)

    def wait(self, timeout_s: float) -> int | None:
        try:
            return self._exited(self._popen.wait(timeout_s))
        except subprocess.TimeoutExpired:
            return None

    def _exited(self, code: int | None) -> int | None:
        """Once the program has exited, end what it left (before its exit is reported, so the
        output read after that is all there will be)."""
        if code is not None and not self._left_ended:
            self._end_leftovers()
        return code

    def stop(self, grace_s: float = 10.0) -> int:
        """SIGTERM the process group, SIGKILL it after `grace_s`; returns the exit code.
        A program already sent SIGTERM (a notice) gets no second one: it may be past its
        handler, in the interpreter's exit, where a second SIGTERM kills it mid-way."""
        if self._popen.poll() is None:
            if not self._terminated:
                self.signal(signal.SIGTERM)
            self._signal_group(signal.SIGCONT)  # a frozen (hung) program must see the SIGTERM too
            if self.wait(grace_s) is None:
                self._signal_group(signal.SIGKILL)
        code = self._exited(self._popen.wait())
        self._log.close()
        return code

    @property
    def asked_to_stop(self) -> bool:
        """Whether it was sent SIGTERM (a notice's, or a stop's) by its agent."""
        return self._terminated

    def signal(self, signum: int) -> None:
        self._terminated = self._terminated or signum == signal.SIGTERM
        self._signal_group(signum)

    def _end_leftovers(self, wait_s: float = 5.0) -> None:
        """SIGKILL what the program left: its process group, and every process carrying its tag
        (descendants in a session of their own). Its group is not a session of its own (see
        `vm/procs.py` on autogroups), so the session is not signalled: it is the agent's."""
        self._left_ended = True
        self._signal_group(signal.SIGKILL)
        deadline = time.monotonic() + wait_s
        # Again until none is left: one may fork between the scan and the kill.
        while (left := tagged(WORKLOAD_TAG_ENV, self.tag)) and time.monotonic() < deadline:
            for proc in left:
                try:
                    proc.kill()
                except psutil.Error:
                    pass
            psutil.wait_procs(left, timeout=0.1)

    def _signal_group(self, signum: int) -> None:
        try:
            os.killpg(self.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def read_output(self, offset: int, max_bytes: int, *, final: bool = False) -> OutputChunk:
        return read_chunk(self.log_path, offset, max_bytes, final=final)

    def tail(self) -> list[str]:
        return read_tail(self.log_path)


def tagged(name: str, value: str) -> list[psutil.Process]:
    """Every live process (but this one) whose environment has `name=value`."""
    me = os.getpid()
    found = []
    for proc in psutil.process_iter(["status", "environ"]):
        environ = proc.info["environ"] or {}
        if proc.pid != me and proc.info["status"] != psutil.STATUS_ZOMBIE and environ.get(name) == value:
            found.append(proc)
    return found


@dataclass(frozen=True)
class OutputChunk:
    data: bytes  # whole lines (a line longer than a chunk comes in pieces)
    offset: int  # where the next read starts
    left: int  # bytes already written after `offset`


def read_chunk(path: Path, offset: int, max_bytes: int, *, final: bool = False) -> OutputChunk:
    """At most `max_bytes` of output from `offset` on, cut after the last whole line; with
    `final` (the writer has exited) also an unterminated last line, once it is the end."""
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        handle.seek(offset)
        data = handle.read(max(0, min(max_bytes, size - offset)))
    if final and offset + len(data) >= size:
        end = len(data)
    else:
        end = data.rfind(b"\n") + 1
        if end == 0 and len(data) >= max_bytes:  # one line longer than a chunk: send it in pieces
            end = len(data)
    return OutputChunk(data[:end], offset + end, max(0, size - offset - end))


TAIL_LINES = 30
TAIL_BYTES = 32 << 10


def read_tail(path: Path, lines: int = TAIL_LINES, max_bytes: int = TAIL_BYTES) -> list[str]:
    """The last `lines` lines of a log, from at most its last `max_bytes` (a cost that does not
    grow with the log)."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            start = max(0, size - max_bytes)
            handle.seek(start)
            data = handle.read(size - start)
    except FileNotFoundError:
        return []
    if start > 0:  # the first line read is probably a piece of a longer one
        data = data[data.find(b"\n") + 1:] or data
    return data.decode("utf-8", "replace").splitlines()[-lines:]


def read_progress(path: Path) -> ProgressRecord | None:
    """The last complete progress record the program wrote with `runtime.report_progress`."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 8192))
            lines = handle.read().split(b"\n")
    except FileNotFoundError:
        return None
    for line in reversed(lines):
        try:
            return ProgressRecord.from_line(line)
        except ValueError:
            continue  # the empty piece after the last newline, or the first line, cut by the seek
    return None


def first_progress(path: Path) -> ProgressRecord | None:
    """The program's first progress record: where this attempt started stepping."""
    try:
        with open(path, "rb") as handle:
            return ProgressRecord.from_line(handle.readline())
    except (FileNotFoundError, ValueError):
        return None


