"""The result a training program reaches uninterrupted, run here as one local process: what a
supervised run that was interrupted and recovered must end at.

One process with as many CPU devices as the cluster's run has chips computes the same steps
as the run's processes together (the same global batch, the same reductions), at a fraction
of the cost of a second run on the cluster.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def final_loss(program: str, args: list[str], devices: int) -> float:
    """The `final_loss` the program's `done` line reports."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "PODMANAGER_"))}
    env.update(JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    done = subprocess.run([sys.executable, program, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=180, check=True)
    found = re.search(r"^done steps=\d+ final_loss=([-0-9.eE]+)$", done.stdout, re.M)
    assert found, done.stdout[-2000:] + done.stderr[-2000:]
    return float(found.group(1))
