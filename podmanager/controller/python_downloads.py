"""Whether the Python a cluster pins has a download for its TPU VMs, checked before anything is
created: a VM whose image has another Python gets the controller's exact one from uv, which
installs interpreters from python-build-standalone, and that has no build of every patch
(none of 3.11.2, Debian 12's). Without one, every boot would fail after the slices bill.

uv's list of downloads is built into the uv the VMs also get (the controller's, pinned), so
`uv python list --only-downloads` answers offline (`UV_OFFLINE=1`: no network is asked).
"""

from __future__ import annotations

import json
import os
import subprocess

from pydantic import BaseModel, TypeAdapter

from podmanager.core.errors import SpecError

# A TPU VM: Linux on x86-64 with glibc, CPython without free threading.
_TPU_VM = {"implementation": "cpython", "os": "linux", "arch": "x86_64", "libc": "gnu", "variant": "default"}


class PythonDownload(BaseModel):
    """One entry of `uv python list --output-format json`, in the fields read here."""

    version: str
    implementation: str
    os: str
    arch: str
    libc: str
    variant: str = "default"


def tpu_vm_downloads() -> list[str]:
    """Every CPython version uv can download for a TPU VM, from the list built into uv."""
    from uv import find_uv_bin

    done = subprocess.run([find_uv_bin(), "python", "list", "--only-downloads", "--all-versions", "--all-platforms",
                           "--output-format", "json"], env={**os.environ, "UV_OFFLINE": "1"},
                          capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise SpecError(f"cannot list the Pythons uv can download: {done.stderr.strip() or done.stdout.strip()}")
    entries = TypeAdapter(list[PythonDownload]).validate_python(json.loads(done.stdout))
    return [e.version for e in entries if all(getattr(e, field) == value for field, value in _TPU_VM.items())]


def check_python_download(version: str, downloads: list[str] | None = None) -> None:
    """SpecError (exit 2) naming the fix unless CPython `version` has a download for a TPU VM."""
    downloads = tpu_vm_downloads() if downloads is None else downloads
    if version in downloads:
        return
    minor = version.rsplit(".", 1)[0]
    same_minor = sorted({v for v in downloads if v.rsplit(".", 1)[0] == minor and v.replace(".", "").isdigit()},
                        key=lambda v: [int(part) for part in v.split(".")])
    instead = f" (it has {', '.join(same_minor[-3:])} of {minor})" if same_minor else ""
    raise SpecError(
        f"the TPU VMs install the controller's exact Python, {version}, and uv has no download of it{instead}; "
        "every VM's boot would fail after its slice was created (nothing was created)",
        hint=f"Run podmanager from a Python that has one, e.g. `uv venv --python {same_minor[-1] if same_minor else minor}` "
             "and install podmanager into it, then run `up` from there.")
