"""A run's Python environment on one host: the host's own (podmanager, Ray, JAX) with the
run's requirements layered on top, installed with uv and kept per host by content hash.

Why not Ray's `uv`/`pip` runtime environments: from a virtualenv (which is how podmanager
is installed on a host) they clone the whole environment first — about 1 GB and 15 s per
host here for one small package. A layer is a fresh virtualenv of the host's interpreter
whose `.pth` adds the host's site-packages behind its own, so it holds only what the host
lacks. uv resolves the requirements against the host's installed versions (as
constraints: a requirement that conflicts with the host's JAX fails with uv's own words)
and installs what is missing. uv is called as the boot's install calls it (`uv_settings`):
with the machine's certificate store and pip's index settings (on a TPU VM, the spec's index),
an Artifact Registry index with the VM's own token.

A layer is built once per host and requirements; an unchanged relaunch pays nothing, a
new host (a replaced slice) builds its own. The cache is the host's own disk:
`$PODMANAGER_HOST_CACHE` (a simulated VM's own folder, gone with the VM), else
`~/.cache/podmanager`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from podmanager.vm.uv_settings import (
    artifact_registry_hosts,
    metadata_token,
    uv_argv,
    uv_env,
    with_index_credentials,
)

CACHE_ENV = "PODMANAGER_HOST_CACHE"
READY_MARK = ".podmanager-ready"
# What uv says when the index could not be reached, as opposed to a requirement that cannot be met.
_TRANSIENT = re.compile(r"(?i)(connection (refused|reset|closed)|timed? ?out|temporary failure|dns error|"
                        r"error sending request|network is unreachable|\b50[234]\b|too many requests)")
# ...unless it is about a certificate (`error sending request ... invalid peer certificate`),
# which no retry mends.
_NOT_TRANSIENT = re.compile(r"(?i)certificate")
INSTALL_TRIES = 3


@dataclass(frozen=True)
class Environment:
    """The interpreter a run's processes use on this host, and what goes first on PATH."""

    python: str
    bin_dir: str
    reused: bool  # nothing was installed for this run: the host's own, or a layer built before


@dataclass(frozen=True)
class HostSetup:
    """What setting up a run on one host came to (the agent's answer to the supervisor)."""

    ok: bool
    seconds: float
    reused: bool = False
    error: str | None = None  # one line: what failed
    already: bool = False  # the run was set up on this host before (an earlier attempt, a spare prepared): nothing done
    lines: list[str] = field(default_factory=list)  # the installer's (or the check's) own words


class SetupFailed(Exception):
    def __init__(self, error: str, lines: list[str], *, transient: bool = False):
        super().__init__(error)
        self.error = error
        self.lines = lines
        self.transient = transient


def cache_root() -> Path:
    configured = os.environ.get(CACHE_ENV)
    return Path(configured) if configured else Path.home() / ".cache" / "podmanager"


def host_environment() -> Environment:
    """The host's own environment, where podmanager itself runs."""
    return Environment(sys.executable, str(Path(sys.executable).parent), reused=True)


def prepare(requirements: list[str], root: Path | None = None) -> Environment:
    """The environment for these requirements: the host's own when there are none, else a
    layer built now or found ready. Raises SetupFailed with uv's error lines."""
    if not requirements:
        return host_environment()
    root = root or cache_root()
    host = _host_packages()
    key = hashlib.sha256(json.dumps([requirements, sys.executable, sys.version, sorted(host.items())])
                         .encode()).hexdigest()[:16]
    layer = root / "envs" / key
    with _locked(layer.with_suffix(".lock")):
        reused = (layer / READY_MARK).exists()
        if not reused:
            try:
                for attempt in Retrying(stop=stop_after_attempt(INSTALL_TRIES), reraise=True,
                                        wait=wait_exponential(multiplier=1, max=8),
                                        retry=retry_if_exception(lambda e: isinstance(e, SetupFailed) and e.transient)):
                    with attempt:
                        _build(layer, requirements, host, root)
            except BaseException:
                shutil.rmtree(layer, ignore_errors=True)
                raise
            (layer / READY_MARK).write_text(json.dumps(requirements))
    return Environment(str(layer / "bin" / "python"), str(layer / "bin"), reused=reused)


def _build(layer: Path, requirements: list[str], host: dict[str, str], root: Path) -> None:
    shutil.rmtree(layer, ignore_errors=True)  # a build cut short, or the try before this one
    _uv(["venv", "--quiet", "--python", sys.executable, str(layer)], root)
    python = layer / "bin" / "python"
    site_packages = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
                         .strip())
    # `import` lines of a .pth run at start-up; addsitedir also reads the host's own .pth files
    # (editable installs), which a plain path line would not.
    host_dirs = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (site_packages / "_podmanager_host.pth").write_text(
        "".join(f"import site; site.addsitedir({d!r})\n" for d in host_dirs))
    wanted = layer / "requirements.txt"
    wanted.write_text("\n".join(requirements) + "\n")
    constraints = layer / "host-constraints.txt"
    constraints.write_text("".join(f"{name}=={version}\n" for name, version in sorted(host.items())))
    resolved = layer / "resolved.txt"
    _uv(["pip", "compile", "--quiet", "--python", str(python), "--no-header", "--no-annotate",
         str(wanted), "-c", str(constraints), "-o", str(resolved)], root)
    options = [line for line in requirements if line.startswith("-")]  # index options, for the install too
    missing = [line for line in resolved.read_text().splitlines()
               if line.strip() and not line.startswith(("#", "-")) and _name(line) not in host]
    if missing:
        install = layer / "install.txt"
        install.write_text("\n".join(options + missing) + "\n")
        _uv(["pip", "install", "--quiet", "--python", str(python), "--no-deps", "-r", str(install)], root)


def _host_packages() -> dict[str, str]:
    """Normalized name -> version of every distribution the host's environment has."""
    return {_normalize(d.metadata["Name"]): d.version for d in importlib.metadata.distributions()
            if d.metadata["Name"]}


def _name(pin: str) -> str:
    """The normalized project name of a resolved line (`name==1.0`, `name @ url`, with markers)."""
    return _normalize(re.split(r"[\s=<>!~@;\[]", pin.strip(), maxsplit=1)[0])


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _uv(args: list[str], root: Path) -> None:
    env = uv_env({**os.environ, "UV_CACHE_DIR": str(root / "uv"), "UV_NO_PROGRESS": "1"})
    env.pop("VIRTUAL_ENV", None)  # uv is told which interpreter, never the agent's venv
    # An Artifact Registry index: this VM's token, fresh for each call (it lasts an hour), in a
    # netrc file of a folder only this user reads, gone with the call.
    with tempfile.TemporaryDirectory(prefix="pm-index-") as private:
        try:
            env = with_index_credentials(env, Path(private) / "netrc", lambda: metadata_token(os.environ))
        except (OSError, ValueError) as error:
            hosts = " ".join(artifact_registry_hosts(env))
            raise SetupFailed(f"cannot read this VM's service-account token for the Artifact Registry index {hosts}",
                              [f"the metadata server: {error}"], transient=True) from None
        done = subprocess.run(uv_argv(args), env=env, capture_output=True, text=True)
    if done.returncode != 0:
        lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        raise SetupFailed(f"uv {args[0]}{' ' + args[1] if args[0] == 'pip' else ''} failed", lines[-40:],
                          transient=bool(_TRANSIENT.search(done.stderr)) and not _NOT_TRANSIENT.search(done.stderr))


def _run(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One build per layer at a time on this host (two runs may ask for the same)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def timed_prepare(requirements: list[str]) -> tuple[Environment | None, HostSetup]:
    """`prepare`, as a report for the supervisor."""
    started = time.monotonic()
    try:
        env = prepare(requirements)
    except SetupFailed as failed:
        return None, HostSetup(False, time.monotonic() - started, error=failed.error, lines=failed.lines)
    return env, HostSetup(True, time.monotonic() - started, reused=env.reused)
