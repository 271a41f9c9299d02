"""What the CLI prints off a terminal: no wrapping, event text as written, no Gloo chatter,
rounded figures, and no empty figures for a plain command."""

import pytest

from podmanager.cli import render
from podmanager.core.event_data import EventData
from podmanager.core.records import HostRef
from podmanager.core.run_results import (
    AttemptResult,
    HostResult,
    IncidentRecord,
    RunResult,
)
from podmanager.state import Event


def test_event_lines_keep_brackets_and_never_wrap(capsys):
    message = "slice 0 replaced (preemption) in " + ", ".join(f"phase{i} {i}.0s" for i in range(20))
    render.print_event(Event(1, "c", 0.0, "slices_replaced", 0, f"[slice 0] {message}", EventData()))
    out = capsys.readouterr().out
    assert out.count("\n") == 1  # one line however long
    assert "slices_replaced [slice 0]: [slice 0] slice 0 replaced" in out


def test_tables_are_not_cut_off_a_terminal(capsys):
    long_id = "train_mlp-20261123-074838-333"
    render.print_table("runs", ["run", "status", "last incident"], [(long_id, "succeeded", "program-failure")])
    out = capsys.readouterr().out
    assert long_id in out and "succeeded" in out and "program-failure" in out


def test_gloo_connection_chatter_is_kept_out_of_the_stream(capsys):
    show = render.printer(all_hosts=False, to_stderr=False)
    show(HostRef(0, 0), "[Gloo] Rank 3 is connected to 7 peer ranks. Expected number of connected peer ranks is : 7\n"
                        "step 1 loss 2.39\n")
    assert capsys.readouterr().out == "[slice-0/host-0] step 1 loss 2.39\n"


HOST = HostResult(slice=0, worker_id=0, exit_code=0)


def result(attempt_log: list[AttemptResult] | None = None, **fields) -> RunResult:
    attempt = AttemptResult(attempt=0, status="succeeded", started=0.0, ended=1.0, hosts=[HOST])
    base = dict(run_id="r", cluster="c", status="succeeded", message="run r succeeded on 1 host(s)", hosts=[HOST],
                attempts=1, attempt_log=attempt_log or [attempt])
    return RunResult(**{**base, **fields})


def test_a_command_without_progress_shows_no_steps_loss_or_goodput():
    figures = "; ".join(render.summary_figures(result()))
    assert figures == "attempts 1, preemptions 0, failures 0, hangs 0"


def test_figures_are_rounded():
    attempt = AttemptResult(attempt=0, status="succeeded", started=0.0, ended=1.0, hosts=[HOST], first_step=1,
                            last_step=300, first_loss=2.3923275470733643, last_loss=0.4711698889732361)
    figures = "; ".join(render.summary_figures(result([attempt], goodput=0.7012)))
    assert figures == "attempts 1, preemptions 0, failures 0, hangs 0; goodput 70%; steps 1 -> 300; loss 2.392 -> 0.4712"


def test_an_elastic_runs_time_on_fewer_slices_is_shown_with_its_result():
    figures = "; ".join(render.summary_figures(result(goodput=0.9, badput={"recovery": 1.0, "degraded": 42.26})))
    assert figures == "attempts 1, preemptions 0, failures 0, hangs 0; goodput 90%; 42.3s on fewer slices"


def test_a_printed_command_line_quotes_what_came_from_the_user(capsys):
    render.print_summary(result(run_id="odd $(id) name", cluster="c"))
    out = capsys.readouterr().out
    assert "logs: podmanager logs -c c --run 'odd $(id) name'" in out


def test_the_incidents_table_shows_each_incident_of_the_result(capsys):
    incident = IncidentRecord(attempt=0, cause="preemption", slices=[1], detail="slice 1 preempted", detected_at=5.0,
                              detect_s=0.4, recover_s=12.25, lost_steps=3, phases={"stop": 0.1}, swaps=[[1, 2]])
    render.print_summary(result(incidents=[incident]))
    row = next(line for line in capsys.readouterr().out.splitlines() if "preemption" in line and "preemptions" not in line)
    assert row.replace("│", " ").split() == ["0", "preemption", "1", "1->2", "0.4", "12.2", "3"]


@pytest.mark.parametrize("backend", ["simulated", "gcp"])
def test_the_head_loss_hint_is_a_command_up_takes(capsys, backend):
    from cli_commands import refusal, suggested_commands

    from podmanager.channel.cluster_status import ClusterStatus

    render.print_status(ClusterStatus(name="demo", backend=backend, project="p", slices=[],
                                      head_problem="the Ray head is down"))
    out = capsys.readouterr().out
    [command] = suggested_commands(out)
    assert command.startswith("podmanager up ") and refusal(command) is None
    assert ("--dry-run" in command) == (backend == "simulated")  # a dry run's spec without `backend:` needs it
