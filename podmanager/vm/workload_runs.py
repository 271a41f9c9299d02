"""A host's side of a run: set it up (unpack the shipped working dir, layer its
requirements on the host's environment, check that the program is there), start the
workload process with its launch environment, report output, exit and progress, and stop it.

The host agent (a Ray actor) delegates to one `HostRuns`; this module has no Ray in it,
so it is tested directly.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from podmanager.core.workload import Workload
from podmanager.runtime import contract
from podmanager.runtime.launch import JAX_COMPILATION_CACHE_ENV
from podmanager.vm import environments
from podmanager.vm.environments import Environment, HostSetup
from podmanager.vm.host_wire import (
    HeldRun,
    HostLaunch,
    PollReply,
    RunSetup,
    check_version,
)
from podmanager.vm.process import (
    WorkloadProcess,
    first_progress,
    read_chunk,
    read_progress,
)
from podmanager.vm.procs import MACHINE_ENV, OWNER_ENV

# Variables of the agent's own process that a workload must not inherit: Ray's worker
# settings (OMP_NUM_THREADS=1 for a zero-CPU actor would throttle the program's threads;
# its debugger hook) and any distributed settings of an earlier launch.
_PRIVATE_PREFIXES = ("RAY_", "PODMANAGER_", "JAX_", "MEGASCALE_", "TPU_WORKER", "XLA_FLAGS")
_PRIVATE_NAMES = frozenset({"OMP_NUM_THREADS", "PYTHONBREAKPOINT", "SPT_NOENV"})
# Set on a simulated VM only: the file its metadata server reads `tpu-env`'s MEGASCALE_* from.
MEGASCALE_FILE_ENV = "PODMANAGER_SIM_MEGASCALE_FILE"


# Output sent per poll: a program that writes faster than this per `hold_s` is caught up
# by polls that do not hold (see `Gang.poll`).
OUTPUT_CHUNK = 4 << 20


@dataclass(frozen=True)
class PreparedRun:
    """A run set up on this host: where its processes run and with which interpreter."""

    cwd: Path
    environment: Environment


# Asks the run's interpreter, in the run's folder, whether a module is there, without
# importing it (a package's __init__ may be slow or have side effects).
_FIND_MODULE = """
import importlib.machinery, sys
path = None
for part in sys.argv[1].split("."):
    spec = importlib.machinery.PathFinder.find_spec(part, path)
    if spec is None:
        sys.exit(3)
    path = spec.submodule_search_locations
"""


class HostRuns:
    """The workload processes of one host, by run id (one live process per run)."""

    def __init__(self, root: Path, compile_cache: Path | None = None):
        self.root = root
        self.compile_cache = compile_cache
        self.prepared: dict[str, PreparedRun] = {}
        self.processes: dict[str, WorkloadProcess] = {}
        self.progress_files: dict[str, Path] = {}
        self.attempts: dict[str, int] = {}  # run id -> the attempt its process belongs to

    def run_dir(self, run_id: str) -> Path:
        return self.root / "runs" / run_id

    def setup(self, run: RunSetup, code_zip: bytes | None) -> HostSetup:
        """Make the run ready to start here: its code (`code_zip`, the bytes of the zip the
        record names) unpacked, its requirements installed (or found installed), its program
        found. Done once per run on a host: a later attempt on the same host finds it ready
        and pays nothing."""
        check_version(run)
        started = time.monotonic()
        run_id, workload = run.run_id, run.workload
        if run_id in self.prepared:
            return HostSetup(True, time.monotonic() - started, reused=True, already=True)
        cwd = self.run_dir(run_id) / "working_dir"
        if code_zip is not None and not cwd.exists():
            shipped = hashlib.sha256(code_zip).hexdigest()
            if run.code_digest is not None and shipped != run.code_digest:
                return HostSetup(False, time.monotonic() - started,
                                 error=f"the shipped code's SHA-256 is {shipped}, not the {run.code_digest} its run names")
            unpacking = cwd.with_name("working_dir.unpacking")
            shutil.rmtree(unpacking, ignore_errors=True)
            with zipfile.ZipFile(io.BytesIO(code_zip)) as archive:
                archive.extractall(unpacking)
            unpacking.rename(cwd)  # whole or not at all
        cwd.mkdir(parents=True, exist_ok=True)
        environment, report = environments.timed_prepare(list(workload.requirements or []))
        if environment is None:
            return report
        prepared = PreparedRun(cwd, environment)
        missing = _missing_program(workload, prepared, self._process_env(prepared, {}, workload))
        if missing is not None:
            return HostSetup(False, time.monotonic() - started, error=missing)
        self.prepared[run_id] = prepared
        return HostSetup(True, time.monotonic() - started, reused=report.reused)

    def _process_env(self, prepared: PreparedRun, env: dict[str, str], workload: Workload) -> dict[str, str]:
        process_env = {k: v for k, v in os.environ.items()
                       if not k.startswith(_PRIVATE_PREFIXES) and k not in _PRIVATE_NAMES}
        for tag in (MACHINE_ENV, OWNER_ENV):  # a simulated host's: its program dies with it, found by `down`
            if tag in os.environ:
                process_env[tag] = os.environ[tag]
        if self.compile_cache is not None:
            # What XLA compiled is kept on the host: a relaunch (after a preemption; the same
            # program run again) of a one-host run loads it rather than compiling again. The
            # launch's (a dry run's, shared by its hosts) and a run's --env win.
            process_env[JAX_COMPILATION_CACHE_ENV] = str(self.compile_cache)
        process_env.update(env)
        process_env.update(workload.env)
        process_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(prepared.cwd), process_env.get("PYTHONPATH")]))
        # `python` and the requirements' own commands are the run's environment's.
        process_env["PATH"] = os.pathsep.join(filter(None, [prepared.environment.bin_dir, process_env.get("PATH")]))
        process_env["PYTHONUNBUFFERED"] = "1"
        return process_env

    def start(self, launch: HostLaunch) -> int:
        """Start the launch's attempt of its run here; the process's pid."""
        check_version(launch)
        run_id, workload, env, attempt = launch.run_id, launch.run.workload, launch.env, launch.attempt
        current = self.processes.get(run_id)
        if current is not None and current.status().running:
            raise RuntimeError(f"run {run_id} already has a live process (pid {current.pid}) on this host")
        if run_id not in self.prepared:  # a run that ships nothing and needs nothing
            report = self.setup(launch.run, None)
            if not report.ok:
                raise RuntimeError(f"run {run_id} cannot start here: {report.error}")
        prepared = self.prepared[run_id]
        folder = self.run_dir(run_id)
        cwd = prepared.cwd
        process_env = self._process_env(prepared, env, workload)
        _leave_megascale_for_metadata(env)
        process_env[contract.ENV_PROGRESS_FILE] = str(folder / f"progress-{attempt}.jsonl")
        argv = workload.argv(prepared.environment.python, process_env)
        try:
            process = WorkloadProcess(argv, env=process_env, cwd=str(cwd), log_path=self.output_path(run_id, attempt))
        except OSError as error:
            raise RuntimeError(f"cannot start {argv[0]!r}: {error.strerror}") from None
        self.processes[run_id] = process
        self.attempts[run_id] = attempt
        self.progress_files[run_id] = Path(process_env[contract.ENV_PROGRESS_FILE])
        return process.pid

    def poll(self, run_id: str, offset: int, hold_s: float = 0.0, max_bytes: int = OUTPUT_CHUNK) -> PollReply:
        """Output since `offset` (at most `max_bytes`), exit status and progress. With
        `hold_s`, answer when the process exits or `hold_s` has passed, whichever is first (a
        long poll: exits are reported at once, with one call per `hold_s` instead of a stream
        of short ones)."""
        process = self.processes.get(run_id)
        if process is None:  # the caller polls a process an earlier agent of this host started
            raise LookupError(f"this host's agent holds no process of run {run_id}: it started afresh "
                              "since the attempt began (its host restarted or was replaced)")
        if hold_s > 0:
            process.wait(hold_s)
        status = process.status()  # before the read, so output written up to an exit is in it
        chunk = process.read_output(offset, max_bytes, final=not status.running)
        progress_file = self.progress_files[run_id]
        return PollReply(
            running=status.running, exit_code=status.exit_code, pid=status.pid, output=chunk.data,
            offset=chunk.offset, left=chunk.left, progress=read_progress(progress_file),
            first_progress=first_progress(progress_file),
            # The file lives on this host: its end travels with the exit, for the failure summary.
            tail=() if status.running else tuple(process.tail()),
            asked_to_stop=process.asked_to_stop,
        )

    def output_path(self, run_id: str, attempt: int) -> Path:
        """The file an attempt's process writes its output to, here; a launch of the attempt writes it anew."""
        return self.run_dir(run_id) / f"output-{attempt}.log"

    def left_output(self, run_id: str, attempt: int, offset: int, max_bytes: int = OUTPUT_CHUNK) -> bytes:
        """What the run's `attempt` wrote here from `offset` on (at most `max_bytes`, whole
        lines), read from its output file: the file outlives the process and the agent that
        started it (a lost Ray head takes the agents with it), so a supervisor started again
        keeps every line before it launches the attempt afresh over the same file."""
        path = self.output_path(run_id, attempt)
        if not path.exists():  # another host now (a slice made again), or never started here
            return b""
        return read_chunk(path, offset, max_bytes, final=True).data

    def describe(self, run_id: str) -> HeldRun | None:
        """Which attempt of the run this host holds and whether its process still runs; None
        when this host never started the run."""
        process = self.processes.get(run_id)
        if process is None:
            return None
        status = process.status()
        return HeldRun(self.attempts[run_id], status.running, status.exit_code, status.pid)

    def stop(self, run_id: str, grace_s: float) -> int | None:
        process = self.processes.get(run_id)
        return process.stop(grace_s) if process else None

    def signal(self, run_id: str | None, signum: int) -> None:
        """Signal the run's process, or every live one when `run_id` is None."""
        targets = self.processes.values() if run_id is None else filter(None, [self.processes.get(run_id)])
        for process in targets:
            if process.status().running:
                process.signal(signum)

    def stop_all(self, grace_s: float = 5.0) -> None:
        for process in self.processes.values():
            process.stop(grace_s)


def _missing_program(workload: Workload, prepared: PreparedRun, process_env: dict[str, str]) -> str | None:
    """Why the program cannot start here, or None: a `-m` module the run's interpreter cannot
    find, a command that is not on the run's PATH."""
    if workload.module is not None:
        found = subprocess.run([prepared.environment.python, "-c", _FIND_MODULE, workload.module],
                               cwd=prepared.cwd, env=process_env, capture_output=True, text=True)
        if found.returncode != 0:
            return (f"module {workload.module!r} is neither in the working dir nor installed on the host"
                    + (f" ({found.stderr.strip().splitlines()[-1]})" if found.stderr.strip() else ""))
    elif workload.command is not None:
        program = workload.argv(prepared.environment.python, process_env)[0]
        if "/" in program:
            if not os.access(prepared.cwd / program, os.X_OK):
                return f"command {program!r} is not an executable file in the working dir"
        elif shutil.which(program, path=process_env.get("PATH")) is None:
            return f"command {program!r} is not on the host's PATH"
    elif workload.entrypoint is not None and not (prepared.cwd / workload.entrypoint).is_file():
        return f"{workload.entrypoint} is not in the shipped working dir"
    return None


def _leave_megascale_for_metadata(env: dict[str, str]) -> None:
    """On a simulated VM, its metadata server's `tpu-env` serves this attempt's MEGASCALE_*
    values, as a real multislice VM's does."""
    target = os.environ.get(MEGASCALE_FILE_ENV)
    if target:
        Path(target).write_text(json.dumps({k: v for k, v in env.items() if k.startswith("MEGASCALE_")}))
