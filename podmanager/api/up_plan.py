"""What `up` is about to do, and the runs it would take slices from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from podmanager.core.errors import SpecError
from podmanager.provisioning.plan import SliceChange, describe_changes
from podmanager.state.run_records import RunRecord


@dataclass(frozen=True)
class UpPlan:
    """What `up` is about to do to the cloud, per slice (in slice order): create, delete,
    replace (delete, then create) or keep."""

    cluster: str
    changes: list[SliceChange]
    spares: str | None = None  # what the hot spares cost (core/spares.py::describe_cost); None without

    def describe(self) -> str:
        return describe_changes(self.changes) + (f"; {self.spares}" if self.spares else "")

    def as_dict(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "summary": self.describe(), "changes": [c.as_dict() for c in self.changes],
                "spares": self.spares}


def runs_in_the_way(plan: UpPlan, active: list[RunRecord]) -> list[tuple[RunRecord, list[int]]]:
    """Those of these active runs on slices the plan deletes or replaces because the spec
    says so (a dead slice a run's supervisor is replacing anyway is not in the way), each
    with those slices."""
    taken = {c.slice_index for c in plan.changes
             if c.edited and c.kind in ("delete", "replace") and c.slice_index is not None}
    return [(run, sorted(taken & set(run.slices))) for run in active if taken & set(run.slices)]


def in_the_way(plan: UpPlan, blocked: list[tuple[RunRecord, list[int]]]) -> SpecError:
    """The refusal of an `up` that would take slices from active runs."""
    lines = [f"run {run.run_id} ({run.status}) runs on slice {c.slice_index} ({c.node}), which the spec "
             f"{'deletes' if c.kind == 'delete' else 'replaces'}: {c.reason}"
             for run, hit in blocked for c in plan.changes if c.slice_index in hit and c.kind in ("delete", "replace")]
    first = blocked[0][0].run_id
    return SpecError(
        "up: the spec takes slices from active runs; nothing was changed:\n  " + "\n  ".join(lines),
        hint=f"Wait for the run to end ('podmanager attach {first}') or cancel it ('podmanager cancel {first}'), "
             "keep its slices in the spec, or pass --force to cancel the run(s) and go ahead.")
