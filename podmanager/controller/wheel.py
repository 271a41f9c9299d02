"""A wheel of the podmanager this process runs, for the TPU VMs to install.

Why a wheel built from the running package, not from a source tree and not shipped by Ray:
- a VM needs podmanager before Ray: it is what joins the VM to the head (`vm/join.py`),
  so Ray's runtime environments, which exist only once a node has joined, come too late;
- it is exactly the code the controller runs, whether podmanager was installed from a
  release, from a checkout (editable) or put on PYTHONPATH: the files are those of the
  imported package, so no checkout, build backend or network is needed to make it.

The wheel is PEP 427's py3-none-any: the package's files (no `__pycache__`, no `.pyc`; package
data such as the startup-script template included), METADATA with the installed
distribution's requirements, the `podmanager` console script, WHEEL and RECORD. Its version
is `<__version__>+h<hash>` (a PEP 440 local label) with the hash of the files' paths and bytes:
what a VM running it reports about itself (`software.content_version`, from the files it
imports). The metadata's hash is the wheel's build tag, so new dependencies alone are a new
file name too: the same name is the same bytes, which lets a staged object be reused by name.
"""

from __future__ import annotations

import base64
import hashlib
import io
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from podmanager.core.errors import PodmanagerError
from podmanager.core.files import write_atomic
from podmanager.core.version import __version__

NAME = "podmanager"
TAG = "py3-none-any"
RUNNING_PACKAGE = Path(__file__).resolve().parent.parent  # the imported podmanager's folder
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest a zip can say: the same tree gives the same bytes


@dataclass(frozen=True)
class _Metadata:
    """The installed distribution's part of the wheel: what pip needs to install its dependencies."""

    summary: str
    requires_python: str | None
    extras: tuple[str, ...]
    requires: tuple[str, ...]  # Requires-Dist lines, markers kept
    console_scripts: tuple[tuple[str, str], ...]  # (name, module:function)


def build_wheel(out_dir: Path, package_dir: Path | None = None) -> Path:
    """The wheel of the podmanager package in `package_dir` (default: the imported one) in
    `out_dir`, built unless a wheel of the same version (so the same bytes) is there already."""
    package_dir = package_dir or RUNNING_PACKAGE
    files = package_files(package_dir)
    dist = _installed_metadata()
    version = f"{__version__}+h{files_hash(files)}"
    build = "0" + hashlib.sha256(repr(dist).encode()).hexdigest()[:8]  # a build tag starts with a digit
    wheel = out_dir / f"{NAME}-{version}-{build}-{TAG}.whl"
    if wheel.is_file():
        return wheel
    out_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(wheel, _wheel_bytes(files, dist, version))  # concurrent builds write the same bytes
    return wheel


def wheel_version(wheel: Path) -> str:
    """The version in a wheel's file name (PEP 427: NAME-VERSION-...)."""
    return wheel.name.split("-")[1]


def package_files(package_dir: Path) -> dict[str, bytes]:
    """Every file of the package by its path in the wheel (podmanager/...), sorted."""
    found = {}
    for path in package_dir.rglob("*"):
        relative = path.relative_to(package_dir)
        if not path.is_file() or "__pycache__" in relative.parts or path.suffix in (".pyc", ".pyo"):
            continue
        found[f"{NAME}/{relative.as_posix()}"] = path.read_bytes()
    return dict(sorted(found.items()))


def _installed_metadata() -> _Metadata:
    try:
        dist = metadata.distribution(NAME)
    except metadata.PackageNotFoundError:
        raise PodmanagerError(
            "podmanager is not installed in this environment, so its dependencies are unknown and no "
            "wheel of it can be built for the TPU VMs", hint="install it: uv pip install -e <your checkout>") from None
    fields = dist.metadata
    scripts = sorted((e.name, e.value) for e in dist.entry_points if e.group == "console_scripts")
    return _Metadata(summary=fields["Summary"] if "Summary" in fields else "",
                     requires_python=fields["Requires-Python"] if "Requires-Python" in fields else None,
                     extras=tuple(fields.get_all("Provides-Extra") or ()), requires=tuple(dist.requires or ()),
                     console_scripts=tuple(scripts))


def files_hash(files: dict[str, bytes]) -> str:
    """The hash of a package's files (paths and bytes) in a version label."""
    digest = hashlib.sha256()
    for path, data in files.items():
        # Lengths keep one file's end from passing for the next file's start.
        digest.update(f"{path}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()[:10]


def _dist_info(dist: _Metadata, version: str) -> dict[str, bytes]:
    lines = ["Metadata-Version: 2.1", f"Name: {NAME}", f"Version: {version}"]
    if dist.summary:
        lines.append(f"Summary: {dist.summary}")
    if dist.requires_python:
        lines.append(f"Requires-Python: {dist.requires_python}")
    lines += [f"Provides-Extra: {extra}" for extra in dist.extras]
    lines += [f"Requires-Dist: {requirement}" for requirement in dist.requires]
    wheel = ["Wheel-Version: 1.0", f"Generator: {__name__}", "Root-Is-Purelib: true", f"Tag: {TAG}"]
    entry_points = ["[console_scripts]", *(f"{name} = {target}" for name, target in dist.console_scripts)]
    return {"METADATA": _text(lines), "WHEEL": _text(wheel), "entry_points.txt": _text(entry_points)}


def _text(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode()


def _wheel_bytes(files: dict[str, bytes], dist: _Metadata, version: str) -> bytes:
    info = f"{NAME}-{version}.dist-info"
    entries = {**files, **{f"{info}/{name}": data for name, data in _dist_info(dist, version).items()}}
    record = [f"{path},sha256={_digest(data)},{len(data)}" for path, data in entries.items()]
    entries[f"{info}/RECORD"] = _text([*record, f"{info}/RECORD,,"])
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, data in entries.items():  # the package sorted, then dist-info with RECORD last (PEP 427)
            entry = zipfile.ZipInfo(path, date_time=_ZIP_TIME)
            entry.external_attr = 0o644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(entry, data, compresslevel=6)
    return buffer.getvalue()


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
