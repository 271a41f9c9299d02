"""What a workload process and its supervisor agree on: exit codes, the environment podmanager
sets for each process, and the progress records the program writes. Plain constants and one
record type, so the supervisor side imports them without pulling in JAX.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

# Exit codes a workload process ends with. After podmanager sent the program a notice's SIGTERM,
# any exit is a stop for the notice (0 included) unless its progress said it was done.
EXIT_OK = 0
EXIT_PREEMPTED = 75  # stopped at a step boundary after a preemption notice (BSD EX_TEMPFAIL)

# Environment podmanager sets for every process of a run, fresh for each attempt.
ENV_CLUSTER = "PODMANAGER_CLUSTER"
ENV_SLICE = "PODMANAGER_SLICE"
ENV_NUM_SLICES = "PODMANAGER_NUM_SLICES"  # the slices this attempt runs on (fewer while an elastic run is shrunk)
ENV_RUN_ID = "PODMANAGER_RUN_ID"
ENV_ATTEMPT = "PODMANAGER_ATTEMPT"
ENV_PARALLELISM = "PODMANAGER_PARALLELISM"
ENV_CHECKPOINT_DIR = "PODMANAGER_CHECKPOINT_DIR"
ENV_PROGRESS_FILE = "PODMANAGER_PROGRESS_FILE"

# A progress record (`ProgressRecord`) is one JSON object per line of the progress file: these
# keys, plus the program's other metrics as floats (e.g. "accuracy").
PROGRESS_STEP = "step"
PROGRESS_TIME = "time"  # unix seconds when the step finished
PROGRESS_PROCESS = "process_id"
PROGRESS_LOSS = "loss"  # the one metric the supervisor reads (the run's summary shows it)
PROGRESS_TOTAL = "total_steps"  # the step count the program declared: reaching it is the run's end
PROGRESS_DONE = "done"  # true: the program has finished its work (its exit ends the run, notice or not)
# The newest checkpoint this process saved (`Checkpointer.save`): its step and when it was final.
# Every later line carries it, so a supervisor that reads only the last line still sees it.
PROGRESS_CHECKPOINT_STEP = "checkpoint_step"
PROGRESS_CHECKPOINT_TIME = "checkpoint_time"
_PROGRESS_KEYS = frozenset({PROGRESS_STEP, PROGRESS_TIME, PROGRESS_PROCESS, PROGRESS_LOSS, PROGRESS_TOTAL,
                            PROGRESS_DONE, PROGRESS_CHECKPOINT_STEP, PROGRESS_CHECKPOINT_TIME})


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # JSON's true is no step


def _is_number(value: Any) -> bool:
    return _is_int(value) or isinstance(value, float)


@dataclass(frozen=True)
class ProgressRecord:
    """One step a process reported: a line of the progress file (`report_progress` writes it,
    the host reads it back and sends it to the supervisor in its poll reply)."""

    step: int
    time: float  # unix seconds when the step finished
    process_id: int | None = None  # which process of the job wrote it (absent from a hand-written line)
    loss: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)  # the program's other metrics
    total_steps: int | None = None  # the step count the program declared, if it did
    done: bool = False  # the program said it has finished its work
    checkpoint_step: int | None = None  # the newest checkpoint this process saved, if any
    checkpoint_time: float | None = None  # unix seconds when that checkpoint was final

    def __post_init__(self) -> None:
        # The line is flat: a metric named like a key would overwrite that key.
        clash = _PROGRESS_KEYS & set(self.metrics)
        if clash:
            raise ValueError(f"progress metric name(s) {sorted(clash)} are reserved; pick another name")

    def to_line(self) -> str:
        """One JSON object and a newline. Non-finite floats are written as NaN/Infinity, which
        `from_line` (Python's json) reads back."""
        fields: dict[str, Any] = {PROGRESS_STEP: self.step, PROGRESS_TIME: self.time}
        if self.process_id is not None:
            fields[PROGRESS_PROCESS] = self.process_id
        if self.loss is not None:
            fields[PROGRESS_LOSS] = self.loss
        if self.total_steps is not None:
            fields[PROGRESS_TOTAL] = self.total_steps
        if self.done:
            fields[PROGRESS_DONE] = True
        if self.checkpoint_step is not None and self.checkpoint_time is not None:
            fields[PROGRESS_CHECKPOINT_STEP] = self.checkpoint_step
            fields[PROGRESS_CHECKPOINT_TIME] = self.checkpoint_time
        return json.dumps({**fields, **self.metrics}) + "\n"

    @classmethod
    def from_line(cls, line: str | bytes) -> ProgressRecord:
        """The record a line holds; ValueError if it holds none (a partial line, or one without
        an integer step and a numeric time). Extra values that are not numbers are left out."""
        data = json.loads(line)
        if not isinstance(data, dict):
            raise ValueError("a progress line is a JSON object")
        step, at, process = data.get(PROGRESS_STEP), data.get(PROGRESS_TIME), data.get(PROGRESS_PROCESS)
        if not _is_int(step) or not _is_number(at):
            raise ValueError(f"a progress line needs an integer {PROGRESS_STEP!r} and a numeric {PROGRESS_TIME!r}")
        loss, total = data.get(PROGRESS_LOSS), data.get(PROGRESS_TOTAL)
        saved, saved_at = data.get(PROGRESS_CHECKPOINT_STEP), data.get(PROGRESS_CHECKPOINT_TIME)
        has_checkpoint = _is_int(saved) and _is_number(saved_at)
        return cls(step=step, time=float(at),
                   process_id=process if _is_int(process) else None,
                   loss=float(loss) if _is_number(loss) else None,
                   metrics={k: float(v) for k, v in data.items() if k not in _PROGRESS_KEYS and _is_number(v)},
                   total_steps=total if _is_int(total) else None,
                   done=data.get(PROGRESS_DONE) is True,
                   checkpoint_step=saved if has_checkpoint else None,
                   checkpoint_time=float(saved_at) if has_checkpoint else None)
