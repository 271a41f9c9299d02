"""What to run: a workload spec, validated before anything starts."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from podmanager.errors import SpecError

_VARIABLE = re.compile(r"\$(\w+)|\$\{(\w+)\}")


class Workload(BaseModel):
    """A program to run as one process per host on every host of the chosen slices.

    Exactly one of `entrypoint` (a Python file, relative to `working_dir`, or `-m module`)
    and `command` (any argv; `$VARS` expand per host from the launch environment).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    entrypoint: str | None = None
    command: list[str] | None = None
    args: list[str] = Field(default_factory=list)
    slices: list[int] | None = None  # None: every slice of the cluster
    parallelism: str | None = None  # checked against the chips before start; None: the program decides
    env: dict[str, str] = Field(default_factory=dict)
    checkpoint_dir: str | None = None
    working_dir: str | None = "."  # shipped to every host; None ships nothing
    hang_timeout_s: float | None = Field(None, gt=0)  # overrides health.hang_timeout_s of the spec
    name: str | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> "Workload":
        if (self.entrypoint is None) == (self.command is None):
            raise ValueError("give either an entrypoint (a .py file or -m module) or a command after --")
        if self.command is not None and not self.command:
            raise ValueError("command: empty; put the program after --")
        return self

    @property
    def display_name(self) -> str:
        if self.name:
            return self.name
        if self.entrypoint:
            return Path(self.entrypoint.removeprefix("-m ")).stem
        return Path(self.command[0]).name  # type: ignore[index]

    def argv(self, python: str, env: dict[str, str]) -> list[str]:
        """The host's command line, with `$VARS` of a command expanded from its env."""
        if self.command is not None:
            return [expand(arg, env) for arg in self.command] + [expand(a, env) for a in self.args]
        assert self.entrypoint is not None
        if self.entrypoint.startswith("-m "):
            return [python, "-u", "-m", self.entrypoint[3:].strip(), *self.args]
        return [python, "-u", self.entrypoint, *self.args]


def expand(text: str, env: dict[str, str]) -> str:
    """`$NAME` and `${NAME}` from `env`; unknown names are left as they are."""
    return _VARIABLE.sub(lambda m: env.get(m.group(1) or m.group(2), m.group(0)), text)


def check_parallelism(parallelism: str, chips: int) -> dict[str, int]:
    """The mesh a parallelism gives on `chips` devices; SpecError (before any start) if none."""
    from podmanager.runtime import parse_parallelism

    try:
        return parse_parallelism(parallelism, chips)
    except ValueError as wrong:
        raise SpecError(f"--parallelism: {wrong}", hint="The product of the axes must equal the chips of the "
                        "slices the run uses, e.g. data=2,model=4 for 8 chips.") from None
