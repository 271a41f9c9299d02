"""A simulated VM's lease: the VM lives while the host record that names it exists.

Why a lease and not a parent-death signal: a simulated VM must outlive the command that
booted it (`up` returns and the hosts stay, as real VMs do), and `ray start` re-parents its
daemons, so there is no parent whose death says the VM's owner is gone. Its owner is the
simulated cloud's folder: the VM's record, `clusters/<cluster>/hosts/<node>-w<i>.json` under
`paths.sim_home()`, is written before the VM boots and removed when `down` or a preemption
forgets the VM. When the record is gone (the folder deleted or lost) or names another
machine (a new VM in its place), the VM stops itself within a few seconds, with what it
launched as machines of its own (a controller VM's Ray head), the way a VM
vanishes with its project. One process of each VM holds the lease:
`python -m podmanager.emulator.vm_lease`.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from podmanager.vm import procs

log = logging.getLogger(__name__)

INTERVAL_S = 1.0
MISSES = 2  # in a row: the record is replaced atomically, but never stop a VM on one odd read


def holds(record: Path, machine_id: str) -> bool:
    found = procs.read_record(record)
    return found is not None and found.get("machine_id") == machine_id


def keep(record: Path, machine_id: str, temp_dir: str | None, *, interval_s: float = INTERVAL_S,
         sleep: Callable[[float], None] = time.sleep) -> None:
    """Hold the lease until it is lost; then kill every other process of the VM and remove
    its temp dir. The caller exits right after."""
    misses = 0
    while misses < MISSES:
        sleep(interval_s)
        misses = 0 if holds(record, machine_id) else misses + 1
    log.warning("lease lost: %s no longer names machine %s; stopping this simulated VM", record, machine_id)
    procs.kill(machine_id, spare_caller=True)
    if temp_dir:  # and what the VM launched as machines of its own (a controller VM's Ray head)
        procs.kill_inside(temp_dir, spare_caller=True)
    procs.remove_temp_dir(temp_dir)


def hold_in_background(record: Path, temp_dir: str | None) -> threading.Thread:
    """Hold the lease of the VM this process belongs to; the process exits when it is lost."""
    machine_id = os.environ[procs.MACHINE_ENV]

    def run() -> None:
        keep(record, machine_id, temp_dir)
        os._exit(0)

    thread = threading.Thread(target=run, name="vm-lease", daemon=True)
    thread.start()
    return thread


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lease", type=Path, help="the VM's host record: the VM stops when it no longer names it")
    parser.add_argument("--temp-dir", help="the VM's Ray temp dir, removed when the VM stops")


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s lease %(message)s")
    parser = argparse.ArgumentParser(prog="python -m podmanager.emulator.vm_lease", description=__doc__.split("\n")[0])
    add_arguments(parser)
    opts = parser.parse_args(argv)
    if opts.lease is None:
        parser.error("--lease RECORD is required")
    hold_in_background(opts.lease, opts.temp_dir).join()


if __name__ == "__main__":
    sys.exit(main())
