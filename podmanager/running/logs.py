"""A run's logs on the controller: each host's output (`RunLogs` writes it as the run goes)
and the result, read back by `podmanager logs` while the run goes or after it ended."""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Iterator

from podmanager.core import paths
from podmanager.core.errors import SpecError
from podmanager.core.records import HostSlot, host_label


def host_file_name(slice_index: int, worker_id: int) -> str:
    """One host's output file in a run's folder; `label` reads it back."""
    return f"slice-{slice_index}-host-{worker_id}.log"


class RunLogs:
    """Each host's output on the controller: `runs/<run_id>/<slice-S-host-W>.log` under the cluster dir."""

    def __init__(self, cluster: str, run_id: str):
        self.folder = paths.cluster_dir(cluster) / "runs" / run_id
        self.folder.mkdir(parents=True, exist_ok=True)

    def path(self, slot: HostSlot) -> Path:
        return self.folder / host_file_name(slot.slice_index, slot.worker_id)

    def size(self, slot: HostSlot) -> int:
        """Bytes of this host's output kept so far."""
        try:
            return self.path(slot).stat().st_size
        except FileNotFoundError:
            return 0

    def append(self, slot: HostSlot, data: bytes) -> None:
        with open(self.path(slot), "ab") as handle:
            handle.write(data)

    def save_result(self, result: dict[str, Any]) -> None:
        (self.folder / "result.json").write_text(json.dumps(result, indent=2))


def runs_dir(cluster: str) -> Path:
    return paths.cluster_dir(cluster) / "runs"


def run_ids(cluster: str) -> list[str]:
    """Runs of the cluster, oldest first."""
    folder = runs_dir(cluster)
    if not folder.exists():
        return []
    return [p.name for p in sorted(folder.iterdir(), key=lambda p: p.stat().st_mtime) if p.is_dir()]


def resolve_run(cluster: str, run_id: str | None) -> Path:
    """The folder of a run (the latest when `run_id` is None). A run just submitted is known
    from its record before its supervisor has made its folder: it has no output yet."""
    from podmanager.core.errors import StateStoreError
    from podmanager.state.runs import RunStore

    try:
        recorded = [r.run_id for r in RunStore().list(cluster)]  # oldest first
    except StateStoreError:  # the output is in the run folders: readable without the store
        recorded = []
    ids = [i for i in run_ids(cluster) if i not in recorded] + recorded
    if not ids:
        raise SpecError(f"--cluster: {cluster} has no runs yet", hint="Start one with 'podmanager run'.")
    if run_id is None:
        return runs_dir(cluster) / ids[-1]
    if run_id not in ids:
        raise SpecError(f"--run: no run {run_id!r} in {cluster} (runs: {', '.join(ids[-5:])})")
    return runs_dir(cluster) / run_id


def host_files(run: Path, host: tuple[int, int] | None, *, waiting: bool = False) -> list[Path]:
    """The host log files of a run: all, or the one of `host` (slice index, worker id); with
    `waiting`, a host with no output yet is no error (it may come)."""
    files = sorted(run.glob("slice-*-host-*.log"))
    if host is None:
        return files
    if waiting:
        return [f for f in files if f.name == host_file_name(*host)]
    wanted = run / host_file_name(*host)
    if wanted not in files:
        raise SpecError(f"--host: no output from {host_label(*host)} in run {run.name}")
    return [wanted]


def label(path: Path) -> str:
    slice_index, worker = re.findall(r"\d+", path.stem)[:2]
    return host_label(int(slice_index), int(worker))


def finished(run: Path) -> bool:
    return (run / "result.json").exists()


def lines(path: Path) -> Iterator[str]:
    """Every line of a host's output, read as it goes (a log may be larger than memory)."""
    with open(path, "rb") as handle:
        for line in handle:
            yield from line.decode("utf-8", "replace").splitlines()  # as splitting the whole text would


@dataclass(frozen=True)
class NewLines:
    text: str
    offset: int  # where the next read starts
    skipped: int  # whole lines left out to stay within the budget


def read_new_lines(path: Path, offset: int, *, final: bool, budget: int | None = None) -> NewLines:
    """The lines written since `offset` (with `final`, an unterminated last one too). With
    `budget` (bytes), more than that is cut to the lines that end within its last `budget`
    bytes, and the lines left out are counted."""
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


def follow(run: Path, host: tuple[int, int] | None, *, poll_s: float = 0.5) -> Iterator[tuple[str, str]]:
    """(host label, line) as lines are written, until the run has finished."""
    offsets: dict[Path, int] = {}
    while True:
        done = finished(run)  # read before the files, so nothing written before the end is missed
        for path in host_files(run, host, waiting=not done):
            new = read_new_lines(path, offsets.get(path, 0), final=done)
            offsets[path] = new.offset
            for line in new.text.splitlines():
                yield label(path), line
        if done:
            return
        time.sleep(poll_s)
