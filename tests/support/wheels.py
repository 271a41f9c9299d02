"""Wheels a test (or a benchmark) needs, built on the spot: no index, no network."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path


def build_wheel(folder: Path, name: str, version: str, source: str, requires: tuple[str, ...] = ()) -> Path:
    """A pure-Python wheel written by hand (a wheel is a zip with its metadata and RECORD)."""
    depends = "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = {f"{name}/__init__.py": source,
             f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{depends}",
             f"{name}-{version}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                                   "Tag: py3-none-any\n"}
    record = [f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()},"
              f"{len(text.encode())}" for path, text in files.items()]
    files[f"{name}-{version}.dist-info/RECORD"] = "\n".join(record + [f"{name}-{version}.dist-info/RECORD,,"]) + "\n"
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel
