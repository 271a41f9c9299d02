"""A dry run's cloud: the project's local Cloud TPU emulator, started, found, restarted, stopped.

The emulator (`podmanager/emulator/`) is a background process per simulated project, owned
by podmanager: the first command that needs it starts it, every later one finds it by its
record under the simulated cloud's folder (`paths.sim_home()`: $PODMANAGER_SIM_HOME, else the
user's own state folder) in sim/emulators/, a dead one is started again from the state it
saved (on the port it had, so clients' channels reconnect), and `down` of the project's last
cluster stops it. Only the emulator touches the simulated cloud; this module only manages
the process.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import time
from typing import Iterator

import grpc
import psutil

from podmanager.core import paths
from podmanager.core.errors import PodmanagerError, SpecError
from podmanager.emulator import record as emulator_record
from podmanager.emulator.record import EmulatorRecord
from podmanager.vm import procs

LOOPBACK, NAMESPACES = "loopback", "namespaces"  # the simulated VMs' network modes (server.py's --network)

MODULE = "podmanager.emulator"
START_TIMEOUT_S = 30.0
STOP_GRACE_S = 10.0


def owner(project: str) -> str:
    """The emulator's own process tag: never one of a cluster's, so no cluster's `down` kills it."""
    return f"emulator:{project}@{paths.sim_home().resolve()}"


def running(project: str) -> EmulatorRecord | None:
    """The project's emulator if it is running (its record names a live emulator process)."""
    found = emulator_record.read(project)
    return found if found is not None and _alive(found) else None


def laptop_public(project: str) -> str:
    """This machine's public address as the project's emulator simulates it (the namespace mode),
    "" in the loopback mode; the emulator started if it is not running."""
    ensure(project)
    found = running(project)
    return found.laptop_public if found is not None else ""


def ensure(project: str, network: str | None = None) -> str:
    """The address of the project's emulator, started (from its saved state) if it is not running.
    `network` (a spec's `simulation.network`; None: whichever): the mode its VMs must run in, that
    of a new one; a running one in the other mode is refused (SpecError), never changed."""
    found = running(project)
    if found is None:
        with _start_lock(project):
            found = running(project)  # another command may have started it meanwhile
            if found is None:
                _check_can(network)
                found = _start(project, emulator_record.read(project), network)
    _check_mode(project, found, network)
    return found.address


def _check_can(network: str | None) -> None:
    from podmanager.emulator.network import names

    if network == NAMESPACES and (why := names.unavailable()) is not None:
        raise SpecError(f"simulation.network: namespaces cannot be made on this machine ({why})",
                        hint="Run as root on Linux, or leave simulation.network out (loopback).")


def _check_mode(project: str, found: EmulatorRecord, network: str | None) -> None:
    running_mode = NAMESPACES if found.laptop_public else LOOPBACK
    if network is not None and network != running_mode:
        raise SpecError(f"simulation.network: {network}, but the emulator of the simulated project {project} "
                        f"runs its VMs in the {running_mode} mode",
                        hint="Leave simulation.network out, or 'podmanager down' the project's clusters first (its "
                             "last down stops the emulator; the next command starts it in the mode asked).")


def stop(project: str) -> bool:
    """Stop the project's emulator (it saves its state first); whether one was running."""
    found = running(project)
    if found is None:
        emulator_record.record_path(project).unlink(missing_ok=True)
        return False
    try:
        process = psutil.Process(found.pid)
        process.terminate()
        if not _ended(process, STOP_GRACE_S):
            process.kill()
            _ended(process, STOP_GRACE_S)
    except psutil.NoSuchProcess:
        pass
    emulator_record.record_path(project).unlink(missing_ok=True)
    return True


def _ended(process: psutil.Process, timeout_s: float) -> bool:
    """Whether it exited within the timeout. A zombie counts: the emulator outlives the command
    that started it, so its parent is init, which reaps it when it gets round to it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.02)
    return False


def stop_all() -> int:
    """Stop every emulator of this state folder; how many ran (tests, and a state folder's end)."""
    return sum(stop(path.stem) for path in sorted(emulator_record.emulators_dir().glob("*.json")))


def _alive(found: EmulatorRecord) -> bool:
    try:
        process = psutil.Process(found.pid)
        return (process.create_time() == found.started and process.status() != psutil.STATUS_ZOMBIE
                and MODULE in " ".join(process.cmdline()))
    except psutil.Error:
        return False


@contextlib.contextmanager
def _start_lock(project: str) -> Iterator[None]:
    """One starter at a time: two commands never start two emulators of one project."""
    with open(emulator_record.emulators_dir() / f"{project}.lock", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _start(project: str, previous: EmulatorRecord | None, network: str | None = None) -> EmulatorRecord:
    port = previous.address.rsplit(":", 1)[1] if previous is not None else "0"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.pop(procs.MACHINE_ENV, None)
    env.pop(procs.ROOT_ENV, None)  # the project's, started from a simulated VM or not: no VM's process
    env[procs.OWNER_ENV] = owner(project)
    env[paths.SIM_HOME_ENV] = str(paths.sim_home())  # its files stay where its clients look, whoever started it
    log_path = emulator_record.log_path(project)
    launched = subprocess.run(
        [sys.executable, "-c", _LAUNCHER, str(log_path), sys.executable, "-m", MODULE, "--project", project,
         "--port", port, *(["--network", network] if network else [])],
        env=env, cwd=paths.sim_home(), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=START_TIMEOUT_S)
    if launched.returncode != 0:
        raise PodmanagerError(f"the local Cloud TPU emulator of the simulated project {project} could not be "
                              f"launched: {launched.stderr.strip()[-500:]}", hint=f"Its log: {log_path}")
    pid = int(launched.stdout)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        found = emulator_record.read(project)
        if found is not None and found.pid == pid:
            return found
        if not _running(pid):
            raise PodmanagerError(f"the local Cloud TPU emulator of the simulated project {project} did not start: "
                                  f"{_tail(log_path)}", hint=f"Its log: {log_path}")
        time.sleep(0.02)
    with contextlib.suppress(psutil.Error):
        psutil.Process(pid).kill()
    raise PodmanagerError(f"the local Cloud TPU emulator of the simulated project {project} did not start within "
                          f"{START_TIMEOUT_S:.0f}s", hint=f"Its log: {log_path}")


# Starts the emulator and exits at once, printing its pid: the emulator must outlive whoever
# needed it first, and a Ray worker (a run's supervisor, a cluster's monitor) kills its children
# when it exits. Orphaned, in a session of its own, it is no one's child or group.
_LAUNCHER = (
    "import subprocess, sys\n"
    "with open(sys.argv[1], 'ab') as log:\n"
    "    child = subprocess.Popen(sys.argv[2:], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,\n"
    "                             start_new_session=True)\n"
    "print(child.pid)\n"
)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _tail(path: os.PathLike[str], lines: int = 5) -> str:
    try:
        with open(path, errors="replace") as handle:
            return " | ".join(handle.read().strip().splitlines()[-lines:])
    except OSError:
        return "(no log)"


def stop_if_idle(project: str) -> bool:
    """Stop the project's emulator when its cloud holds nothing, no node and no VM (`down` of its last cluster);
    whether it stopped. Its state stays on disk: the next command starts it again."""
    from podmanager.emulator.control import EmulatorControl

    found = running(project)
    if found is None:
        sweep_networks()
        return False
    with EmulatorControl(found.address) as control:
        try:
            if control.all_nodes() or control.all_queued_resources() or control.all_instances():
                return False
        except grpc.RpcError:  # an emulator of an older podmanager that cannot say: left running
            return False
    stopped = stop(project)  # its simulated network goes with it
    sweep_networks()
    return stopped


def sweep_networks() -> list[str]:
    """Remove the simulated networks (the namespace mode's) whose emulator or test is gone: what
    `down` leaves behind of a crashed one. Nothing to do where none was ever made."""
    from podmanager.emulator.network import names

    return names.cleanup_orphans() if names.CLAIMS.is_dir() else []
