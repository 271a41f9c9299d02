"""What to run: a workload spec, validated before anything starts."""

from __future__ import annotations

import os
import re
from pathlib import Path
from shlex import quote
from typing import Collection

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from podmanager.core.errors import SpecError

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
    # Installed on every host before the program starts: a requirements file (read where the
    # run is submitted) or its lines; `submitted()` turns a file into its lines.
    requirements: str | list[str] | None = None
    hang_timeout_s: float | None = Field(None, gt=0)  # overrides health.hang_timeout_s of the spec
    # Elastic: a lost slice with no spare ready, the run goes on at once on the slices left if at
    # least this many, and grows back when the replacement is ready. None: wait for it.
    min_slices: int | None = Field(None, ge=1)
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
        """The program's name as run ids, service ids and checkpoint folders take it: only
        [a-z0-9-_.], so a file named `$(id).py` never reaches a printed command line."""
        if self.name:
            given = self.name
        elif self.entrypoint:
            given = Path(self.entrypoint.removeprefix("-m ")).stem
        else:
            given = Path(self.command[0]).name  # type: ignore[index]
        return safe_name(given)

    @classmethod
    def from_argv(cls, argv: list[str], **options: object) -> "Workload":
        """What `podmanager run` takes: a .py file or `-m module` with its arguments, or any
        other command as is. `options` are the other fields (slices, env, ...)."""
        if not argv:
            raise SpecError("run: name a program (e.g. workloads/train_mlp.py) or a command after --")
        try:
            if argv[0].endswith(".py"):
                return cls(entrypoint=argv[0], args=argv[1:], **options)  # type: ignore[arg-type]
            if argv[0] == "-m" and len(argv) > 1:
                return cls(entrypoint=f"-m {argv[1]}", args=argv[2:], **options)  # type: ignore[arg-type]
            return cls(command=argv, **options)  # type: ignore[arg-type]
        except ValidationError as invalid:
            flags = {"hang_timeout_s": "--hang-timeout", "checkpoint_dir": "--checkpoint-dir", "env": "--env",
                     "slices": "--slices", "working_dir": "--working-dir",
                     "requirements": "--requirements", "min_slices": "--min-slices"}
            problems = [f"{flags.get(str(e['loc'][0]), e['loc'][0]) if e['loc'] else 'run'}: {e['msg']}"
                        for e in invalid.errors()]
            raise SpecError("; ".join(problems)) from None

    @property
    def module(self) -> str | None:
        """The `-m` module the program is, if it is one."""
        if self.entrypoint is not None and self.entrypoint.startswith("-m "):
            return self.entrypoint[3:].strip()
        return None

    def submitted(self, cwd: Path) -> "Workload":
        """The workload as the cluster gets it, independent of the submitting process: the
        working dir absolute (the supervisor and the hosts run elsewhere), a requirements
        file read into its lines (the hosts cannot read the client's disk)."""
        working_dir = None if self.working_dir is None else str((cwd / self.working_dir).resolve())
        requirements = self.requirements
        if isinstance(requirements, str):
            requirements = read_requirements(cwd / requirements)
        return self.model_copy(update={"working_dir": working_dir, "requirements": requirements or None})

    def check_program(self, shipped: Collection[str] | None = None) -> None:
        """Fail before anything starts when the program is not where it will run: a typo must
        not cost an attempt, let alone a slice. A `.py` entrypoint must be a file of the
        working dir that is shipped (`shipped`: the package's file names; .gitignore can leave
        one out). A command or `-m` module naming something of the working dir that cannot run
        (a folder, a data file, a package without `__main__.py`) is refused too; one that is
        not there is checked on the hosts, after their setup (it may be installed there)."""
        root = Path(self.working_dir or ".")
        if shipped is not None and not root.is_dir():
            # Packed on the machine that sent the run, and checked there against its folder:
            # here only what was shipped is known.
            if self.command is None and self.module is None and Path(str(self.entrypoint)).as_posix() not in shipped:
                raise SpecError(f"run: {self.entrypoint} is not among the files of the working dir shipped to the hosts",
                                hint="Check the path, or pass --working-dir to the folder that holds it.")
            return
        # Without a working dir nothing of this folder is shipped: the hosts run what they have.
        if self.command is not None:
            if self.working_dir is not None:
                _check_command(root, self.command[0])
            return
        if self.module is not None:
            if self.working_dir is not None:
                _check_module(root, self.module)
            return
        assert self.entrypoint is not None
        if not (root / self.entrypoint).is_file():
            raise SpecError(f"run: {self.entrypoint} is not a file in the working dir {root.resolve()}",
                            hint="Check the path, or pass --working-dir to the folder that holds it.")
        # Lexically (no symlinks followed): `../train.py` or an absolute path is a file here,
        # but not one of the folder shipped, so the hosts would not find it.
        program = Path(os.path.abspath(root / self.entrypoint))
        if self.working_dir is not None and not program.is_relative_to(os.path.abspath(root)):
            raise SpecError(f"run: {self.entrypoint} is outside the working dir {root.resolve()}, the folder that "
                            "is shipped to the hosts, so they would not find it",
                            hint=f"Run from a folder that holds it and what it imports (e.g. 'cd {quote(str(program.parent))}'"
                                 f" and 'podmanager run {quote(program.name)}'), or give --working-dir such a folder "
                                 "and the program's path inside that folder.")
        if shipped is not None and Path(self.entrypoint).as_posix() not in shipped:
            raise SpecError(f"run: {self.entrypoint} is left out of what is shipped to the hosts "
                            f"(.gitignore or .rayignore in {root.resolve()})",
                            hint="Remove it from the ignore file, or run a program that is shipped.")

    def requirement_lines(self) -> list[str]:
        """The requirements as lines, once `submitted()` has read any file."""
        if isinstance(self.requirements, str):
            raise ValueError("requirements is still a file name: call submitted() first")
        return list(self.requirements or [])

    def argv(self, python: str, env: dict[str, str]) -> list[str]:
        """The host's command line, with `$VARS` of a command expanded from its env."""
        if self.command is not None:
            return [expand(arg, env) for arg in self.command] + [expand(a, env) for a in self.args]
        assert self.entrypoint is not None
        if self.entrypoint.startswith("-m "):
            return [python, "-u", "-m", self.entrypoint[3:].strip(), *self.args]
        return [python, "-u", self.entrypoint, *self.args]


_UNSAFE = re.compile(r"[^a-z0-9_.-]+")
NAME_MAX = 48  # leaves a run id (name, time, a suffix) well inside a file name's 255 bytes


def safe_name(text: str) -> str:
    """`text` in [a-z0-9-_.] ('Train $(id).py' -> 'train-id-.py'), never empty, never '.' or '..'."""
    name = re.sub(r"\.{2,}", ".", _UNSAFE.sub("-", text.lower()))[:NAME_MAX].strip("-.")
    return name or "program"


_WHAT_RUNS = "PROGRAM is a .py file, -m module, or a command after --"


def _check_command(root: Path, program: str) -> None:
    """A command's program, if the working dir holds it, is a file that can be executed."""
    where = Path(program).expanduser()
    where = where if where.is_absolute() else root / where
    if where.is_dir():
        raise SpecError(f"run: {program} is a folder, not a program; {_WHAT_RUNS}",
                        hint=f"Run a file in it (podmanager run {quote(program + '/main.py')}) or it as a package "
                             f"(podmanager run -m {quote(Path(program).name)}).")
    if where.is_file() and not os.access(where, os.X_OK):
        fix = (f"A requirements file goes with -r {quote(program)}, before the program." if where.suffix == ".txt"
               else f"Run it with its interpreter after --, e.g. podmanager run -- bash {quote(program)}, or make it "
                    "executable.")
        raise SpecError(f"run: {program} is not a program (a file that is neither .py nor executable); {_WHAT_RUNS}",
                        hint=fix)


def _check_module(root: Path, module: str) -> None:
    """A `-m` package of the working dir has a `__main__.py` to run."""
    package = root.joinpath(*module.split("."))
    if package.is_dir() and not (package / "__main__.py").is_file() and not package.with_suffix(".py").is_file():
        raise SpecError(f"run: -m {module}: {package} is a package without __main__.py, so python cannot run it",
                        hint=f"Run one of its modules (podmanager run -m {quote(module + '.train')}) or add {package}/__main__.py.")


def read_requirements(path: Path) -> list[str]:
    """A requirements file's lines that mean something: no blanks, no comments."""
    try:
        text = path.read_text()
    except OSError as error:
        raise SpecError(f"--requirements: cannot read {path}: {error.strerror}",
                        hint="Name a requirements file (pip's format), relative to where you run podmanager.") from None
    lines = [line.split(" #")[0].strip() for line in text.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


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
