"""The result a training program reaches uninterrupted, run here as one local process: what a
supervised run that was interrupted and recovered must end at.

One process with as many CPU devices as the cluster's run has chips computes the same steps
as the run's processes together (the same global batch, the same reductions), at a fraction
of the cost of a second run on the cluster.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator

REPO = Path(__file__).resolve().parents[2]


def final_loss(program: str, args: list[str], devices: int) -> float:
    """The `final_loss` the program's `done` line reports."""
    with final_loss_meanwhile(program, args, devices) as result:
        return result()


@contextlib.contextmanager
def final_loss_meanwhile(program: str, args: list[str], devices: int) -> Iterator[Callable[[], float]]:
    """`final_loss`, computed while the caller does something else (a test's cluster run
    mostly waits); calling what this gives waits for it. Stopped on leaving, if still running."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "PODMANAGER_"))}
    env.update(JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    process = subprocess.Popen([sys.executable, program, *args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)

    def result() -> float:
        stdout, stderr = process.communicate(timeout=180)
        assert process.returncode == 0, stderr[-3000:]
        found = re.search(r"^done steps=\d+ final_loss=([-0-9.eE]+)$", stdout, re.M)
        assert found, stdout[-2000:] + stderr[-2000:]
        return float(found.group(1))

    try:
        yield result
    finally:
        process.kill()
        process.communicate()
