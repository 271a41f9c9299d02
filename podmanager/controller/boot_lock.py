"""The TPU VMs' whole environment, resolved once: every package podmanager, Ray, JAX and
`boot.packages` pull in, pinned by `uv pip compile` against the controller's Python (and, for
real VMs, the TPU VMs' platform), so a slice booted weeks later installs exactly what its
siblings did, whatever the index has gained since.

The lock is compiled the first time `up` needs it and kept in `$PODMANAGER_HOME/locks/`, named
by what it resolved (`Software.install_key` and the platform): later `up`s and recoveries of the
same software reuse it, and an edit of `boot:` (or a new podmanager) makes a new one. The
startup script carries it and installs with it as uv's constraints (`--constraint`). podmanager's
own line is left out: the VMs install the wheel (or version) `boot.podmanager` names. It is
resolved against the VMs' index (`boot.index_url`, `boot.extra_index_urls`) when the spec names one.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from podmanager.controller.software import Software
from podmanager.core import paths
from podmanager.core.errors import SpecError
from podmanager.core.files import write_atomic
from podmanager.core.spec import CLOUD_PLATFORM_SCOPE
from podmanager.vm.uv_settings import (
    uv_argv,
    uv_env,
    with_index,
    with_index_credentials,
)

# The TPU VM images (tpu-ubuntu2204-base, v2-alpha-tpuv5-lite, v2-alpha-tpuv5, v2-alpha-tpuv6e) are
# Ubuntu 22.04 on x86-64: glibc 2.35, so manylinux_2_35 and older wheels install there. uv's generic
# x86_64-unknown-linux-gnu target means manylinux_2_28, which never takes libtpu (its wheels are
# manylinux_2_31 only): jax[tpu] did not resolve at all.
# https://cloud.google.com/tpu/docs/runtimes (the images), https://pypi.org/project/libtpu/#files (the wheels)
TPU_VM_PLATFORM = "x86_64-manylinux_2_35"
_OWN_LINE = re.compile(r"^podmanager(\s|@|=|\[|$)", re.IGNORECASE)


def lock_inputs(software: Software, wheel: Path | None) -> list[str]:
    """What the lock resolves: Ray and JAX at the controller's versions, `boot.packages`, and
    podmanager (its local wheel, the release, or a wheel's https URL) for its dependencies."""
    source = software.podmanager_source
    if wheel is not None:
        own = [str(wheel)]
    elif source.startswith(("https://", "http://")) or source.startswith("podmanager=="):
        own = [source]
    else:  # a gs:// wheel uv cannot read: its dependencies resolve with the VM's install
        own = []
    return [*own, *software.pinned_requirements(), *software.packages]


def compile_lock(requirements: list[str], *, python: str, platform: str | None,
                 environ: Mapping[str, str] | None = None, index_url: str = "",
                 extra_index_urls: tuple[str, ...] = ()) -> str:
    """`uv pip compile` of `requirements` for `python` (and `platform`; None: this machine's),
    with uv set up as pip reaches the index (`vm/uv_settings.py`), or against the VMs' own
    index when the spec names one (an Artifact Registry one read with this machine's Google
    credentials); podmanager's own line left out. SpecError with uv's own last lines if it
    cannot be resolved."""
    with tempfile.TemporaryDirectory(prefix="pm-lock-") as folder:
        inputs = Path(folder) / "requirements.in"
        inputs.write_text("".join(f"{r}\n" for r in requirements))
        platform_args = ["--python-platform", platform] if platform else []
        env = with_index(uv_env(os.environ if environ is None else environ), index_url, list(extra_index_urls))
        env = with_index_credentials(env, Path(folder) / "netrc", google_token)  # the folder is 0700
        done = subprocess.run(
            uv_argv(["pip", "compile", "--quiet", "--no-header", "--no-annotate", "--python-version", python,
                     *platform_args, str(inputs)]),
            env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        last = "\n".join(done.stderr.strip().splitlines()[-12:])
        raise SpecError(f"boot.packages: the TPU VMs' environment ({', '.join(requirements)}) cannot be resolved "
                        f"for Python {python}:\n{last}",
                        hint="fix or remove the boot.packages entry uv names, or make the package index reachable")
    return "".join(line + "\n" for line in done.stdout.splitlines() if line.strip() and not _left_out(line))


def google_token() -> str:
    """An access token of this machine's Google credentials (Application Default Credentials),
    for an Artifact Registry index; SpecError naming the fix if there are none."""
    import google.auth  # imported here: only an Artifact Registry index needs it
    import google.auth.transport.requests
    from google.auth.exceptions import GoogleAuthError

    try:
        credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
        credentials.refresh(google.auth.transport.requests.Request())
    except GoogleAuthError as failed:
        raise SpecError(f"boot.index_url: an Artifact Registry index is read with your Google credentials to lock "
                        f"the VMs' environment, and there are none here: {failed}",
                        hint="run 'gcloud auth application-default login'") from None
    return str(credentials.token)


def _left_out(line: str) -> bool:
    """A comment, podmanager itself, or a file on this machine (its wheel): no constraint for a VM."""
    return line.startswith(("#", "/", "file:")) or bool(_OWN_LINE.match(line))


def cached_lock(key: str, requirements: list[str], *, python: str, platform: str | None,
                environ: Mapping[str, str] | None = None, index_url: str = "",
                extra_index_urls: tuple[str, ...] = ()) -> str:
    """The lock named `key`, compiled the first time it is asked for and read ever after."""
    path = paths.locks_dir() / f"{key}.txt"
    if path.is_file():
        return path.read_text()
    text = compile_lock(requirements, python=python, platform=platform, environ=environ, index_url=index_url,
                        extra_index_urls=extra_index_urls)
    write_atomic(path, text.encode())
    return text


def lock_for(software: Software, wheel: Path | None, *, simulated: bool) -> str:
    """The lock every VM installs `software` with: a real VM's for the TPU VMs' platform, a
    simulated one's for this machine."""
    platform = None if simulated else TPU_VM_PLATFORM
    key = f"{software.install_key()}-{'local' if simulated else 'tpu'}"  # the index is in the key
    return cached_lock(key, lock_inputs(software, wheel), python=software.python, platform=platform,
                       index_url=software.index_url, extra_index_urls=software.extra_index_urls)
