"""The generated reference in docs/reference/ says what the code takes: regenerated in
memory, it must equal the committed files, and it names every spec field and every command."""

from __future__ import annotations

import typing

import pytest
import typer
from pydantic import BaseModel

from podmanager.cli import app, reference
from podmanager.core import faults, spec


@pytest.mark.parametrize("name", ["spec.md", "cli.md"])
def test_committed_reference_is_current(name: str) -> None:
    path = reference.REFERENCE_DIR / name
    expected = reference.rendered()[path]
    committed = path.read_text() if path.exists() else ""
    assert committed == expected, (f"docs/reference/{name} is stale (the code changed, or the file was edited by "
                                   f"hand); run: {reference.REGENERATE}")


def _models_under(model: type[BaseModel]) -> list[type[BaseModel]]:
    found = [model]
    for field in model.model_fields.values():
        for inner in _models_in(field.annotation):
            if inner not in found and inner.__module__ != faults.__name__:
                found += _models_under(inner)
    return found


def _models_in(annotation: object) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for argument in typing.get_args(annotation) for m in _models_in(argument)]


def test_spec_reference_names_every_field_with_its_description() -> None:
    text = reference.render_spec()
    models = _models_under(spec.ClusterSpec) + list(typing.get_args(faults.FaultKind))
    missing = [f"{model.__name__}.{name}" for model in models for name, field in model.model_fields.items()
               if f"| `{name}` |" not in text or (field.description and " ".join(field.description.split()) not in text)]
    assert missing == []
    undescribed = [f"{model.__name__}.{name}" for model in _models_under(spec.ClusterSpec)
                   for name, field in model.model_fields.items() if not field.description]
    assert undescribed == [], "spec fields without Field(description=...): " + ", ".join(undescribed)


def test_spec_reference_shows_defaults_and_bounds() -> None:
    text = reference.render_spec()
    assert "| `max_failures` | int | `2` |" in text
    assert "| `interval_s` | float | `1.0` |" in text and "(> 0, <= 60)" in text
    assert '| `capacity` | "on-demand" \\| "spot" \\| "reserved" | `"on-demand"` |' in text
    assert "### kind: `preempt`" in text


def test_cli_reference_names_every_command_and_option() -> None:
    text = reference.render_cli()
    root = typer.main.get_command(app)
    context = typer.Context(root, info_name="podmanager")

    def walk(group: typing.Any, ctx: typer.Context, prefix: str) -> list[str]:
        missing = []
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            child = typer.Context(command, info_name=name, parent=ctx)
            if f"## `podmanager {prefix}{name}`" not in text:
                missing.append(f"{prefix}{name}")
            for param in command.get_params(child):
                for option in (*param.opts, *param.secondary_opts):
                    if param.param_type_name == "option" and option not in ("-h", "--help") and f"`{option}`" not in text:
                        missing.append(f"{prefix}{name} {option}")
            if hasattr(command, "list_commands"):
                missing += walk(command, child, f"{prefix}{name} ")
        return missing

    assert walk(root, context, "") == []
    assert "| `--working-dir` | DIR | `.` |" in text
    assert "| `-e`, `--env` | NAME=VALUE |" in text


def test_main_writes_both_files(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(reference, "REFERENCE_DIR", tmp_path / "reference")
    reference.main()
    assert (tmp_path / "reference" / "spec.md").read_text() == reference.render_spec()
    assert (tmp_path / "reference" / "cli.md").read_text() == reference.render_cli()
