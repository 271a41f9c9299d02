"""A run's folder on the controller, `RunFolder`: `runs/<run_id>/` under the cluster's dir,
with one log file per host (the supervisor appends each host's output as the run goes) and
the run's `result.json`. `Tail` reads the logs as they grow, for `logs -F` and `attach`.

The folder holds output, not state: whether a run has finished is its record's
(`state.runs.RunRecord.finished`), never a file here. `result.json` is a copy of the
result for a person looking in the folder; no code reads it.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator

from podmanager.core import paths
from podmanager.core.errors import SpecError
from podmanager.core.files import write_atomic
from podmanager.core.paths import PROGRESS_FILE, RUNS
from podmanager.core.records import HostRef, HostSlot
from podmanager.core.run_results import RunResult

RESULT_FILE = "result.json"
WATCHED_FILE = ".watched"  # touched while someone follows the output live (its mtime is the last time)
_LOG_NAME = re.compile(r"slice-(\d+)-host-(\d+)\.log")


def log_name(host: HostRef | HostSlot) -> str:
    """The name of one host's log file in a run's folder; `parse_log_name` reads it back."""
    return f"slice-{host.slice_index}-host-{host.worker_id}.log"


def parse_log_name(name: str) -> HostRef | None:
    """The host whose log file `name` is; None for any other file."""
    match = _LOG_NAME.fullmatch(name)
    return HostRef(int(match.group(1)), int(match.group(2))) if match else None


class RunFolder:
    """The folder of one run on this machine. Made when output is first written: a run just
    submitted has a record but no folder yet, and reads of it find no logs."""

    def __init__(self, cluster: str, run_id: str, *, root: Path | None = None):
        """`root`: where the runs' folders are, if not the cluster's (a copy of its history)."""
        self.cluster = cluster
        self.run_id = run_id
        self.folder = (root or runs_root(cluster)) / run_id

    def __repr__(self) -> str:
        return f"RunFolder({self.cluster!r}, {self.run_id!r})"

    # -------------------------------------------------------------- writing (the supervisor)

    def path(self, host: HostRef | HostSlot) -> Path:
        """This host's log file."""
        return self.folder / log_name(host)

    def size(self, host: HostRef | HostSlot) -> int:
        """Bytes of this host's output kept so far."""
        try:
            return self.path(host).stat().st_size
        except FileNotFoundError:
            return 0

    def append(self, host: HostRef | HostSlot, data: bytes) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.path(host), "ab") as handle:
            handle.write(data)

    def save_result(self, result: RunResult) -> None:
        """`result.json`, for a person reading the folder (the record has the result too)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        write_atomic(self.folder / RESULT_FILE, result.model_dump_json(indent=2))

    def append_progress(self, attempt: int, step: int, at: float, loss: float | None,
                        metrics: dict[str, float]) -> None:
        """One point of the run's metrics (its supervisor's latest step, at most once a second)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        point = {"attempt": attempt, "step": step, "time": at, **({"loss": loss} if loss is not None else {}), **metrics}
        with open(self.folder / PROGRESS_FILE, "a") as handle:
            handle.write(json.dumps(point) + "\n")

    def read_progress(self, offset: int, *, max_points: int) -> tuple[list[dict[str, float]], int]:
        """The points written from byte `offset` on, thinned evenly to at most `max_points` (the
        last one always kept), and the offset after them."""
        try:
            with open(self.folder / PROGRESS_FILE, "rb") as handle:
                handle.seek(offset)
                data = handle.read()
        except FileNotFoundError:
            return [], 0
        end = data.rfind(b"\n") + 1  # a line still being written is read next time
        lines = data[:end].splitlines()
        if len(lines) > max_points:
            stride = len(lines) / max_points
            lines = [lines[int(i * stride)] for i in range(max_points - 1)] + [lines[-1]]
        return [json.loads(line) for line in lines if line.strip()], offset + end

    # -------------------------------------------------------------- followed live

    def mark_watched(self) -> None:
        """Someone follows this run's output live (the dashboard): its hosts' output is fetched
        more often for a while (`watched`), at the cost of more calls to each host's agent."""
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / WATCHED_FILE).touch()

    def watched(self, within_s: float) -> bool:
        try:
            return time.time() - (self.folder / WATCHED_FILE).stat().st_mtime <= within_s
        except FileNotFoundError:
            return False

    # -------------------------------------------------------------- reading

    def logs(self, host: HostRef | None = None, *, waiting: bool = False) -> list[tuple[HostRef, Path]]:
        """The host log files there are, in host order: all, or the one of `host`; with
        `waiting`, a host with no output yet is no error (it may come)."""
        found: list[tuple[HostRef, Path]] = []
        for path in self._files():
            ref = parse_log_name(path.name)
            if ref is not None:
                found.append((ref, path))
        found.sort(key=lambda item: (item[0].slice_index, item[0].worker_id))
        if host is None:
            return found
        mine = [(ref, path) for ref, path in found if ref == host]
        if not mine and not waiting:
            raise SpecError(f"--host: no output from {host.label} in run {self.run_id}")
        return mine

    def _files(self) -> list[Path]:
        try:
            return list(self.folder.iterdir())
        except FileNotFoundError:
            return []


def runs_root(cluster: str) -> Path:
    """The folder holding every run folder of the cluster."""
    return paths.cluster_path(cluster) / RUNS  # its writers make it: a reader leaves no folder


def run_ids(cluster: str) -> list[str]:
    """Runs of the cluster with a folder, oldest first."""
    folder = runs_root(cluster)
    if not folder.exists():
        return []
    return [p.name for p in sorted(folder.iterdir(), key=lambda p: p.stat().st_mtime) if p.is_dir()]


def resolve_run(cluster: str, run_id: str | None) -> RunFolder:
    """The folder of a run (the latest when `run_id` is None). A run just submitted is known
    from its record before its supervisor has made its folder: it has no output yet."""
    from podmanager.core.errors import StateStoreError
    from podmanager.state.run_records import RunStore

    try:
        recorded = [r.run_id for r in RunStore().list(cluster)]  # oldest first
    except StateStoreError:  # the output is in the run folders: readable without the store
        recorded = []
    ids = [i for i in run_ids(cluster) if i not in recorded] + recorded
    if not ids:
        raise SpecError(f"--cluster: {cluster} has no runs yet", hint="Start one with 'podmanager run'.")
    if run_id is None:
        return RunFolder(cluster, ids[-1])
    if run_id not in ids:
        raise SpecError(f"--run: no run {run_id!r} in {cluster} (runs: {', '.join(ids[-5:])})")
    return RunFolder(cluster, run_id)


def lines(path: Path) -> Iterator[str]:
    """Every line of a host's output, read as it goes (a log may be larger than memory)."""
    with open(path, "rb") as handle:
        for line in handle:
            yield from line.decode("utf-8", "replace").splitlines()  # as splitting the whole text would


# ---------------------------------------------------------------- tailing


@dataclass(frozen=True)
class NewLines:
    text: str
    offset: int  # where the next read starts
    skipped: int  # whole lines left out to stay within the budget


def read_new_lines(path: Path, offset: int, *, final: bool, budget: int | None = None) -> NewLines:
    """The one offset rule of every reader of a run's logs: the whole lines written since
    `offset` (with `final`, an unterminated last one too), the next read starting after the
    last one given. With `budget` (bytes), more than that is cut to the lines that end
    within its last `budget` bytes, and the lines left out are counted."""
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        start, skipped = offset, 0
        if budget is not None and size - offset > budget:
            cut = size - budget
            handle.seek(cut - 1)
            window = handle.read(size - cut + 1)
            newline = window.find(b"\n")
            start = cut + newline if newline >= 0 else cut  # the first line start at or after `cut`
            skipped = _count_lines(handle, offset, start)
        handle.seek(start)
        data = handle.read(size - start)
    end = len(data) if final else data.rfind(b"\n") + 1
    return NewLines(data[:end].decode("utf-8", "replace"), start + end, skipped)


def _count_lines(handle: BinaryIO, start: int, end: int, chunk: int = 1 << 20) -> int:
    handle.seek(start)
    count = 0
    while start < end:
        data = handle.read(min(chunk, end - start))
        if not data:
            break
        count += data.count(b"\n")
        start += len(data)
    return count


@dataclass(frozen=True)
class HostLines:
    host: HostRef
    path: Path
    new: NewLines


class Tail:
    """Where a reader is in each host's log of one run: each `read` gives every host's lines
    written since the last (from the start at first), in host order. A reader that learns
    the run has finished reads once more with `final`, which also gives unterminated last
    lines: a reader must learn that before this read, so nothing written before the end is
    missed."""

    def __init__(self, run: RunFolder, host: HostRef | None = None, *, budget: int | None = None):
        self.run = run
        self.host = host
        self.budget = budget
        self.offsets: dict[Path, int] = {}

    def read(self, *, final: bool) -> list[HostLines]:
        found = []
        for host, path in self.run.logs(self.host, waiting=not final):
            new = read_new_lines(path, self.offsets.get(path, 0), final=final, budget=self.budget)
            self.offsets[path] = new.offset
            found.append(HostLines(host, path, new))
        return found
