"""podmanager/channel/run_status.py: a run crosses the channel as `RunStatus`, built from the
store's row by its fields of the same names; the row (its supervisor's phase and process) stays
on the controller, and a reply of the version that sent the row itself still reads."""

from __future__ import annotations

import json
import typing

from podmanager.channel import records
from podmanager.channel.run_status import RunStatus
from podmanager.core.run_results import IncidentRecord, Ledger, RunProgress
from podmanager.core.workload import Workload
from podmanager.state.run_records import RunRecord, RunStore
from podmanager.state.run_state import Running, SupervisorProcess

INCIDENT = IncidentRecord(attempt=0, cause="preemption", slices=[1], detail="slice 1 preempted", detected_at=5.0,
                          detect_s=0.5, recover_s=None, lost_steps=2, phases={"stop": 0.2})


def stored_row() -> RunRecord:
    row = RunRecord(run_id="r1", cluster="c", workload=Workload(entrypoint="train.py", env={"K": "<secret>"}),
                    slices=[0, 1], budgets={"preemption": 3}, checkpoint_dir="gs://b/c", status="recovering",
                    attempt=1, phase=Running(attempt=1, started=4.0), ledger=Ledger(incidents=[INCIDENT]),
                    progress=RunProgress(step=12, steps_per_s=2.0), warnings=["slow"],
                    supervisor=SupervisorProcess(pid=4321, starts=2), created_at=1.0)
    RunStore().create(row)
    found = RunStore().get("r1")
    assert found is not None
    return found


def test_each_field_of_the_status_is_the_rows_field_of_the_same_type() -> None:
    row = typing.get_type_hints(RunRecord)
    differ = {name: (field.annotation, row.get(name)) for name, field in RunStatus.model_fields.items()
              if row.get(name) != field.annotation}
    assert differ == {}


def test_a_rows_status_says_what_the_row_says_and_leaves_its_supervisor_behind() -> None:
    row = stored_row()
    status = RunStatus.of(row)
    assert {name: getattr(status, name) for name in RunStatus.model_fields} == \
        {name: getattr(row, name) for name in RunStatus.model_fields}
    assert status.active and not status.finished
    sent = json.loads(records.RunReply(run=status).model_dump_json())["run"]
    assert "phase" not in sent and "supervisor" not in sent and "4321" not in json.dumps(sent)
    assert records.RunReply.model_validate_json(records.RunReply(run=status).model_dump_json()).run == status


def test_a_reply_of_the_version_that_sent_the_row_reads_as_the_status() -> None:
    """A controller not yet upgraded sends the whole row (phase, supervisor and all)."""
    row = stored_row()
    old = {"run": {**{name: getattr(row, name) for name in RunStatus.model_fields},
                   "phase": {"name": "running", "attempt": 1, "started": 4.0}, "supervisor": {"pid": 4321}}}
    old["run"] = {k: (v.model_dump(mode="json") if hasattr(v, "model_dump") else v) for k, v in old["run"].items()}
    read = records.RunReply.model_validate_json(json.dumps(old)).run
    assert read == RunStatus.of(row)
