"""Records are typed across every boundary (issue 35): no record type, pydantic model or
dataclass, has a field typed `Any`, a bare `dict`, `dict[..., Any]` or `list[dict]`, so what
one process or file hands another says what it holds; and a run's record written by the
version before its ledger and result were typed still reads."""

from __future__ import annotations

import collections.abc
import dataclasses
import importlib
import inspect
import json
import pkgutil
import sqlite3
import types
import typing
from dataclasses import dataclass
from typing import Any, Callable, Union

from pydantic import BaseModel

import podmanager

# Fields left loose on purpose, each with why. Every other field of every record is typed.
EXCEPTIONS = {
    # A service's requests and answers: the user's program's own data, whatever its model takes
    # and returns; podmanager carries them from the router to a replica and back without looking.
    "podmanager.runtime.replica_protocol.Request.inputs",
    "podmanager.runtime.replica_protocol.Result.outputs",
    "podmanager.runtime.serving._Answer.output",
    "podmanager.serving.router._Outcome.outputs",
    # Google's discovery documents as Google wrote them (JSON Schema-like dicts): the emulator
    # checks requests against them; their shape is Google's, read in `emulator/validation.py`.
    "podmanager.emulator.discovery.Method.parameters",
    "podmanager.emulator.discovery.Api.schemas",
    "podmanager.emulator.discovery.Api.system_parameters",
    # A refused request's error body, as Google's front end shapes it (`error.details[]` of
    # several @types), answered instead of the handler's.
    "podmanager.emulator.schema_gate.Checked.refused",
}

# What must be among the records walked: those the issue names, so a walk that misses modules fails.
NAMED = {
    "podmanager.state.run_records.RunRecord", "podmanager.core.run_results.Ledger",
    "podmanager.core.run_results.RunResult", "podmanager.core.run_results.IncidentRecord",
    "podmanager.core.run_results.AttemptResult", "podmanager.vm.probe.ProbeResult",
    "podmanager.vm.agent.AgentIdentity", "podmanager.controller.host_info.HostInfo",
    "podmanager.channel.cluster_status.ClusterStatus", "podmanager.channel.cluster_status.HostStatus",
    "podmanager.state.services.ServiceRecord", "podmanager.runtime.contract.ProgressRecord",
    "podmanager.controller.snapshot.HostsSnapshot", "podmanager.channel.run_status.RunStatus",
}


def record_types() -> dict[str, type]:
    """Every pydantic model and dataclass defined in a podmanager module, by its full name."""
    found: dict[str, type] = {}
    for module_info in pkgutil.walk_packages(podmanager.__path__, "podmanager."):
        if module_info.name.endswith("__main__"):  # runs a program when imported
            continue
        module = importlib.import_module(module_info.name)
        for name, value in vars(module).items():
            if inspect.isclass(value) and value.__module__ == module.__name__ and (
                    issubclass(value, BaseModel) or dataclasses.is_dataclass(value)):
                found[f"{module.__name__}.{name}"] = value
    return found


def field_types(record: type) -> dict[str, Any]:
    if issubclass(record, BaseModel):
        return {name: field.annotation for name, field in record.model_fields.items()}
    hints = typing.get_type_hints(record)
    return {field.name: hints[field.name] for field in dataclasses.fields(record)}


def loose(annotation: Any) -> str | None:
    """How `annotation` fails to say what it holds, or None when it does."""
    if annotation is Any:
        return "Any"
    if annotation is dict:
        return "a bare dict"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is collections.abc.Callable:
        return None  # a callback a process object holds, not data it hands on
    if origin is dict and Any in args:
        return "dict[..., Any]"
    if origin is list and args and (args[0] is dict or typing.get_origin(args[0]) is dict and Any in
                                    typing.get_args(args[0])):
        return "list[dict]"
    if origin in (Union, types.UnionType, list, dict, tuple, set, frozenset, typing.Annotated):
        return next((reason for arg in args if (reason := loose(arg))), None)
    return None


def loose_fields() -> dict[str, str]:
    return {f"{name}.{field}": reason for name, record in record_types().items()
            for field, annotation in field_types(record).items() if (reason := loose(annotation))}


def test_no_record_has_a_loose_field_but_the_exceptions_written_down():
    found = loose_fields()
    unexplained = {name: reason for name, reason in found.items() if name not in EXCEPTIONS}
    assert not unexplained, f"type these fields (or say in EXCEPTIONS why not): {unexplained}"
    stale = EXCEPTIONS - set(found)
    assert not stale, f"typed now: take them out of EXCEPTIONS: {stale}"


def test_the_walk_reaches_every_record_the_issue_names():
    assert NAMED <= set(record_types())


@dataclass
class _Loose:
    anything: Any
    bare: dict
    untyped: dict[str, Any]
    rows: list[dict]
    maybe: list[dict[str, Any]] | None
    callback: Callable[..., Any]
    fine: dict[str, list[int]]


def test_the_check_tells_each_loose_form_from_a_typed_one():
    assert {name: loose(annotation) for name, annotation in field_types(_Loose).items()} == {
        "anything": "Any", "bare": "a bare dict", "untyped": "dict[..., Any]", "rows": "list[dict]",
        "maybe": "list[dict]", "callback": None, "fine": None}


# ------------------------------------------------------------ a record of the previous version

# A finished run's row as the version before typed records wrote it: the workload, ledger and
# result as plain JSON, the result repeating the attempts' steps as "metrics" and each incident's
# first slice as "slice", the ledger with the "causes" an older one kept.
_INCIDENT = {"attempt": 0, "cause": "preemption", "slices": [1], "detail": "slice 1 preempted", "detected_at": 20.0,
             "detect_s": 0.5, "recover_s": 9.0, "lost_steps": 2, "phases": {"stop": 0.2, "delete": 1.5},
             "host": None, "swaps": None}
_ATTEMPTS = [
    {"attempt": 0, "status": "failed", "started": 10.0, "ended": 20.0, "hosts": [
        {"slice": 0, "worker_id": 0, "exit_code": None, "lost": "preempted"}], "failed_host": "slice-1/host-0",
     "failure": "preempted", "last_lines": ["step 7"], "first_step": 1, "last_step": 7, "first_loss": 2.5,
     "last_loss": 1.5, "first_step_time": 11.0, "last_step_time": 19.0, "detected_at": 20.0, "setup_s": 1.0,
     "setup_error": None, "setup_installed": []},
    {"attempt": 1, "status": "succeeded", "started": 28.0, "ended": 40.0, "hosts": [
        {"slice": 0, "worker_id": 0, "exit_code": 0, "lost": None}], "failed_host": None, "failure": None,
     "last_lines": [], "first_step": 6, "last_step": 12, "first_loss": 1.6, "last_loss": 0.9,
     "first_step_time": 29.0, "last_step_time": 39.0, "detected_at": None, "setup_s": 0.5, "setup_error": None,
     "setup_installed": ["slice-0/host-0"]},
]
OLD_ROW = {
    "run_id": "train-1", "cluster": "c", "slices": "[0, 1]", "budgets": "{}", "checkpoint_dir": None,
    "status": "succeeded", "attempt": 1, "phase": '{"name": "finished"}', "progress": '{"step": 12}',
    "cancel_requested": 0, "supervisor": '{"pid": 1, "starts": 1}', "warnings": "[]", "created_at": 1.0,
    "updated_at": 2.0,
    "workload": json.dumps({"entrypoint": "train.py", "command": None, "args": ["--steps", "12"], "slices": None,
                            "parallelism": None, "env": {"API_KEY": "<secret>"}, "checkpoint_dir": None,
                            "working_dir": "/work/project", "requirements": None, "hang_timeout_s": None,
                            "name": None}),
    "ledger": json.dumps({"attempts": _ATTEMPTS, "incidents": [_INCIDENT], "causes": {"preemption": 1}}),
    "result": json.dumps({"run_id": "train-1", "cluster": "c", "status": "succeeded", "message": "run train-1 "
                          "succeeded on 1 host(s)", "hosts": _ATTEMPTS[1]["hosts"],
                          "metrics": {"first_step": 1, "last_step": 12, "first_loss": 2.5, "last_loss": 0.9},
                          "attempts": 2, "preemptions": 1, "failures": 0, "hangs": 0, "goodput": 0.6,
                          "badput": {"setup": 1.5, "startup": 2.0, "recovery": 8.0}, "wall_s": 31.0,
                          "incidents": [{**_INCIDENT, "slice": 1}], "attempt_log": _ATTEMPTS,
                          "log_dir": "/runs/train-1", "setup_error": None}),
}


def test_a_run_recorded_by_the_previous_version_reads_typed_and_says_the_same():
    from podmanager.api.run_handle import run_summary
    from podmanager.channel.run_status import RunStatus
    from podmanager.core.run_results import final_result
    from podmanager.state.run_records import RunStore

    runs = RunStore()
    with sqlite3.connect(runs.path) as db:
        db.execute(f"INSERT INTO runs ({', '.join(OLD_ROW)}) VALUES ({', '.join('?' * len(OLD_ROW))})",
                   tuple(OLD_ROW.values()))
    run = runs.get("train-1")
    assert run is not None
    assert (run.workload.entrypoint, run.workload.args, run.workload.env) == ("train.py", ["--steps", "12"],
                                                                              {"API_KEY": "<secret>"})
    assert [a.last_step for a in run.ledger.attempts] == [7, 12]
    assert run.ledger.incidents[0].phases == {"stop": 0.2, "delete": 1.5}
    result = final_result(run)
    # Worked out from the attempts, the same as the old record stored.
    assert result.metrics.model_dump() == json.loads(OLD_ROW["result"])["metrics"]
    assert result.incidents == run.ledger.incidents  # one Incident model in both
    assert result.attempt_log[0].hosts[0].lost == "preempted"
    summary = run_summary(RunStatus.of(run))
    assert (summary["last_incident"], summary["setup_s"], summary["goodput"]) == ("preemption", 1.5, 0.6)
    # Written back by this version, it reads the same.
    runs.save(run)
    again = runs.get("train-1")
    assert again is not None and (again.workload, again.ledger, again.result) == (run.workload, run.ledger, run.result)


def test_the_result_json_keeps_its_keys_and_drops_only_the_incident_slice_it_repeated():
    from podmanager.core.run_results import RunResult

    old = json.loads(OLD_ROW["result"])
    shown = RunResult.model_validate(old).model_dump(mode="json")
    assert set(shown) == set(old)
    assert shown["metrics"] == old["metrics"]
    assert [set(i) for i in shown["incidents"]] == [set(old["incidents"][0]) - {"slice"}]
