"""`podmanager run`'s command line through typer's CliRunner, no Ray: anything starting with
`-` before the program is one of podmanager's options (an unknown one is a usage error, exit
2, before anything starts); everything from the program on is the program's, untouched."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

import podmanager.api
from podmanager.cli import app
from podmanager.core.workload import Workload


class FakeCluster:
    """What `run --detach` calls: the workload it would submit is kept, nothing starts."""

    name = "demo"

    def __init__(self) -> None:
        self.submitted: list[Workload] = []

    def submit(self, workload: Workload, *, budgets: dict[str, int] | None = None) -> Any:
        self.submitted.append(workload)
        return SimpleNamespace(run_id="run-1", cluster=self.name)

    def close(self) -> None:
        pass


@pytest.fixture
def resolved(monkeypatch) -> list[Any]:
    """The clusters `run` resolved (by name), each a FakeCluster."""
    clusters: list[Any] = []

    def resolve(name: str | None) -> FakeCluster:
        clusters.append((name, FakeCluster()))
        return clusters[-1][1]

    monkeypatch.setattr(podmanager.api, "resolve_cluster", resolve)
    return clusters


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), prog_name="podmanager")


def one_line(output: str) -> str:
    """The error box's text as one line (rich wraps it at the terminal's width)."""
    return " ".join(output.replace("│", " ").split())


def submitted(resolved: list[Any]) -> Workload:
    [(_, cluster)] = resolved
    [workload] = cluster.submitted
    return workload


def test_a_typoed_option_is_refused_with_the_close_one_before_anything_starts(resolved):
    result = invoke("run", "-c", "demo", "--requirments", "r.txt", "main.py")
    assert result.exit_code == 2, result.output
    assert "No such option: --requirments. Did you mean --requirements?" in one_line(result.output)
    assert resolved == []  # no cluster looked up, so no Ray either


@pytest.mark.parametrize(("typo", "close"), [("--slcies", "--slices"), ("--max-failure", "--max-failures"),
                                             ("--checkpoint_dir", "--checkpoint-dir")])
def test_the_closest_option_is_suggested(resolved, typo, close):
    result = invoke("run", typo, "1", "main.py")
    assert result.exit_code == 2
    assert f"No such option: {typo}. Did you mean {close}?" in one_line(result.output)
    assert resolved == []


@pytest.mark.parametrize(("options", "name"), [(["--bogus"], "--bogus"), (["-x"], "-x"), (["-dx"], "-x"),
                                               (["-d", "--bogus=1"], "--bogus")])
def test_an_unknown_option_with_nothing_close_says_where_program_options_go(resolved, options, name):
    result = invoke("run", *options, "main.py", "--steps", "5")
    assert result.exit_code == 2
    assert f"No such option: {name}. The program's own options go after it" in one_line(result.output)
    assert resolved == []


def test_everything_after_a_py_program_is_its_own(resolved):
    result = invoke("run", "-c", "demo", "-d", "main.py", "--steps", "5", "-c", "other", "--", "--detach")
    assert result.exit_code == 0, result.output
    assert resolved[0][0] == "demo"
    workload = submitted(resolved)
    assert (workload.entrypoint, workload.args) == ("main.py", ["--steps", "5", "-c", "other", "--", "--detach"])


def test_a_module_keeps_its_options(resolved):
    result = invoke("run", "-c", "demo", "--detach", "-m", "pkg.mod", "--x", "1", "-p", "model")
    assert result.exit_code == 0, result.output
    workload = submitted(resolved)
    assert (workload.module, workload.args, workload.parallelism) == ("pkg.mod", ["--x", "1", "-p", "model"], None)


def test_a_command_after_double_dash_is_run_as_is(resolved):
    result = invoke("run", "-c", "demo", "-d", "--", "python", "-u", "x.py", "--rank", "$JAX_PROCESS_ID")
    assert result.exit_code == 0, result.output
    assert submitted(resolved).command == ["python", "-u", "x.py", "--rank", "$JAX_PROCESS_ID"]


def test_options_before_the_program_are_podmanagers_in_every_spelling(resolved):
    result = invoke("run", "--cluster=demo", "-dpdata", "--env", "A=1", "-e", "B=2", "main.py", "-p", "model")
    assert result.exit_code == 0, result.output
    assert resolved[0][0] == "demo"
    workload = submitted(resolved)
    assert (workload.parallelism, workload.env, workload.args) == ("data", {"A": "1", "B": "2"}, ["-p", "model"])


def test_m_without_a_module_is_a_usage_error(resolved):
    result = invoke("run", "-c", "demo", "-m")
    assert result.exit_code == 2
    assert "-m: name the module to run" in one_line(result.output)
    assert resolved == []


@pytest.fixture
def a_cluster(monkeypatch):
    """`run` resolves this stand-in cluster; nothing may be submitted."""
    cluster = SimpleNamespace(name="c", submit=lambda *a, **k: pytest.fail("submitted"), close=lambda: None)
    monkeypatch.setattr(podmanager.api, "resolve_cluster", lambda name: cluster)


@pytest.mark.parametrize("flags, named", [(["--max-failures", "-1"], "--max-failures"),
                                          (["--slices", ""], "--slices"),
                                          (["--env", "A B=x"], "--env"),
                                          (["--min-slices", "0"], "--min-slices")])
def test_a_run_flag_out_of_range_is_bad_input(a_cluster, flags, named):
    result = invoke("run", "-c", "c", "--detach", *flags, "train.py")
    assert result.exit_code == 2 and named in result.output


def test_more_min_slices_than_the_run_has_is_bad_input_and_nothing_is_submitted(monkeypatch, tmp_path):
    """The check is the API's (`run_slices`, called by every submit): the CLI only passes the flag."""
    from podmanager.api.submission import run_slices
    from podmanager.core.spec import parse_spec

    spec = parse_spec({"name": "c", "backend": "simulated", "slices": [{"accelerator": "v4-8", "count": 2}]})
    checked: list[Workload] = []

    def submit(workload: Workload, *, budgets: dict[str, int] | None = None) -> Any:
        run_slices(spec, workload)
        checked.append(workload)  # reached only past the checks: a submit would start here
        return SimpleNamespace(run_id="run-1", cluster="c")

    monkeypatch.setattr(podmanager.api, "resolve_cluster",
                        lambda name: SimpleNamespace(name="c", submit=submit, close=lambda: None))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('hi')\n")
    result = invoke("run", "-c", "c", "--detach", "--min-slices", "3", "train.py")
    assert result.exit_code == 2, result.output
    assert "--min-slices: 3 is more than the run's 2 slice(s) [0, 1]" in one_line(result.output)
    assert checked == []
    ok = invoke("run", "-c", "c", "--detach", "--min-slices", "2", "train.py")
    assert ok.exit_code == 0 and checked[0].min_slices == 2  # at most the run's slices is accepted
