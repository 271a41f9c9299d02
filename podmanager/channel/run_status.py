"""`RunStatus`: a run as its readers see it (`runs`, `attach`, a handle's `status`, `wait` and
`cancel`), declared once for both ends of the channel and for a cluster on this machine alike.

Built from the store's row (`state/run_records.py::RunRecord`) by its fields of the same
names; the row keeps what only its supervisor reads (the phase, the supervisor's process) and
stays the store's. Versioned with the channel (`records.WIRE_VERSION`): a field is added with a
default, never dropped, and one a newer controller adds is ignored here."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from podmanager.core.run_results import ACTIVE, FINISHED, Ledger, RunProgress, RunResult
from podmanager.core.workload import Workload


class RunStatus(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    run_id: str
    cluster: str
    workload: Workload  # as submitted, its environment's values hidden
    slices: list[int]
    budgets: dict[str, int]  # overrides of the spec's recovery budgets
    checkpoint_dir: str | None
    status: str = "starting"
    attempt: int = 0
    ledger: Ledger = Field(default_factory=Ledger)  # every attempt's result and every incident so far
    progress: RunProgress = Field(default_factory=RunProgress)
    result: RunResult | None = None  # once finished
    cancel_requested: bool = False
    warnings: list[str] = []  # what the user should know of it (shown by `runs`)
    created_at: float = 0.0
    updated_at: float = 0.0

    @classmethod
    def of(cls, row: object) -> RunStatus:
        """The status of a run's row: its fields of these names (a test holds that the row has
        each, of the same type)."""
        return cls.model_validate(row, from_attributes=True)

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    @property
    def finished(self) -> bool:
        """The run has ended: what every reader (`wait`, `attach`, `logs -F`) goes by."""
        return self.status in FINISHED
