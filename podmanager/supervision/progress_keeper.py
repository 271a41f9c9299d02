"""A running attempt's latest step, kept by its supervisor: in the run's record (what `runs` and
the dashboard show) and as the run's metrics over time in its folder (the dashboard's charts);
and each checkpoint the program saved, as an event for the run's timeline.
"""

from __future__ import annotations

from collections.abc import Callable

from podmanager.attempts.gang import Gang
from podmanager.attempts.logs import RunFolder
from podmanager.attempts.progress import combine
from podmanager.core.clock import Clock
from podmanager.core.events import EventKind
from podmanager.core.run_results import AttemptResult, RunProgress
from podmanager.state.run_records import RunRecord


class ProgressKeeper:
    def __init__(self, run: RunRecord, logs: RunFolder, clock: Clock, save: Callable[[], None], every_s: float,
                 record: Callable[..., None]):
        self.run = run
        self.record = record  # the run's event log
        self.logs = logs
        self.clock = clock
        self.save = save
        self.every_s = every_s  # how often the latest step goes into the run's record
        self._saved = 0.0
        self._series_last: tuple[int, int] | None = None  # (attempt, step) of the series' last point
        self._checkpoint_noted: tuple[int, int] | None = None  # (attempt, step) of the last checkpoint recorded

    def tick(self, gang: Gang) -> None:
        """A checkpoint the program saved, at once; the attempt's latest step (as its result will
        count it), at most once per `every_s`."""
        progress = combine(gang.hosts)
        if progress.checkpoint is not None:
            self.note_checkpoint(self.run.attempt, *progress.checkpoint)
        now = self.clock.now()
        if now - self._saved < self.every_s:
            return
        self._saved = now
        latest = progress.latest
        if latest is None:
            return
        if self._series_last != (self.run.attempt, latest.step):
            # The run's metrics over time, for the dashboard's charts (the record keeps the latest only).
            self.logs.append_progress(self.run.attempt, latest.step, latest.time, latest.loss, latest.metrics)
            self._series_last = (self.run.attempt, latest.step)
        self.run.progress = RunProgress(step=latest.step, time=latest.time, loss=latest.loss,
                                        steps_per_s=progress.steps_per_s)
        self.save()

    def end(self, result: AttemptResult) -> None:
        """The attempt's last step ends its part of the series (a poll after the last save saw it);
        a checkpoint saved as it stopped is noted."""
        if result.last_step is not None and result.last_step_time is not None \
                and self._series_last != (result.attempt, result.last_step):
            self.logs.append_progress(result.attempt, result.last_step, result.last_step_time, result.last_loss, {})
            self._series_last = (result.attempt, result.last_step)
        if result.checkpoint_step is not None and result.checkpoint_time is not None:
            self.note_checkpoint(result.attempt, result.checkpoint_step, result.checkpoint_time)

    def note_checkpoint(self, attempt: int, step: int, saved_at: float) -> None:
        """A checkpoint the program said is final, recorded once for the run's timeline. Two
        saved between one look and the next (under a second apart): the newer one only."""
        if self._checkpoint_noted == (attempt, step):
            return
        self._checkpoint_noted = (attempt, step)
        self.record(EventKind.CHECKPOINT_SAVED, f"checkpoint at step {step} saved", attempt=attempt, step=step,
                    saved_at=saved_at)
