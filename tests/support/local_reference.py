"""The losses a training program reaches uninterrupted, computed here as one local process: what a
supervised run that was interrupted and recovered must end at.

One process with as many CPU devices as the cluster's run has chips computes the same steps
as the run's processes together (the same global batch, the same reductions), at a fraction
of the cost of a second run on the cluster.

Computed once per session for each (program, arguments, devices): the example programs have
no schedule, so step N's loss is the same however many steps follow, and one run to the most
steps any collected test declared (`uninterrupted_run`, at its module's import) answers every
test of that program. The run starts at the first test that asks (`meanwhile`), beside that
test's cluster run, and later tests read its answer.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

REPO = Path(__file__).resolve().parents[2]
# The whole run, from the first ask: a JAX start and a few hundred steps of a small model.
RUN_TIMEOUT_S = 180.0
STEP_LINE = re.compile(r"^step (\d+) loss ([-0-9.eE]+)$", re.M)


class LocalRun:
    """One program's losses, step by step, on `devices` CPU devices: one process, started at
    the first ask, for the most steps declared by then."""

    def __init__(self, program: str, args: tuple[str, ...], devices: int) -> None:
        self.program, self.args, self.devices = program, args, devices
        self.declared = 0  # the most steps a test declared
        self._process: subprocess.Popen | None = None
        self._steps = 0  # what the started process runs to
        self._losses: dict[int, float] | None = None

    def start(self) -> None:
        """Start the process (in the background) unless it has started."""
        if self._process is not None:
            return
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "PODMANAGER_"))}
        env.update(JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={self.devices}")
        self._steps = self.declared
        self._process = subprocess.Popen(
            [sys.executable, self.program, *self.args, "--steps", str(self._steps), "--log-every", "1"],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def losses(self, steps: int) -> list[float]:
        """Steps 1..`steps`' losses (waits for the process)."""
        if self._losses is None or steps > self._steps:
            if self._process is not None and steps > self._steps:  # declared after the start: run again
                self.stop()
            self.declared = max(self.declared, steps)
            self.start()
            self._losses = self._wait()
        return [self._losses[step] for step in range(1, steps + 1)]

    def _wait(self) -> dict[int, float]:
        process = self._process
        assert process is not None
        try:
            stdout, stderr = process.communicate(timeout=RUN_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise
        if process.returncode != 0:
            self._process = None  # the next ask tries again; this one fails
            raise AssertionError(f"{self.program} on {self.devices} devices: exit {process.returncode}\n{stderr[-3000:]}")
        losses = {int(step): float(loss) for step, loss in STEP_LINE.findall(stdout)}
        assert sorted(losses) == list(range(1, self._steps + 1)), stdout[-2000:] + stderr[-2000:]
        return losses

    def stop(self) -> None:
        process, self._process, self._losses = self._process, None, None
        if process is not None and process.poll() is None:
            process.kill()
            process.communicate()


@dataclass(frozen=True)
class Uninterrupted:
    """What a test declared: `steps` of its program's uninterrupted run."""

    run: LocalRun
    steps: int

    def start(self) -> Uninterrupted:
        """Computed from now on while the caller does something else (a test's cluster run
        mostly waits), unless an earlier test had it computed."""
        self.run.start()
        return self

    @contextlib.contextmanager
    def meanwhile(self) -> Iterator[Callable[[], float]]:
        """The final loss, computed meanwhile (`start`); calling what this gives waits for it."""
        yield self.start().final_loss

    def final_loss(self) -> float:
        return self.losses()[-1]

    def losses(self) -> list[float]:
        return self.run.losses(self.steps)


_RUNS: dict[tuple[str, tuple[str, ...], int], LocalRun] = {}


def uninterrupted_run(program: str, steps: int, devices: int, args: tuple[str, ...] = ()) -> Uninterrupted:
    """Declare, at a test module's import, `steps` of `program`'s uninterrupted run on `devices`
    CPU devices (`args`: its other arguments): the session's one run of it goes that far."""
    run = _RUNS.setdefault((program, tuple(args), devices), LocalRun(program, tuple(args), devices))
    run.declared = max(run.declared, steps)
    return Uninterrupted(run, steps)


@atexit.register
def _stop_all() -> None:
    for run in _RUNS.values():
        run.stop()
