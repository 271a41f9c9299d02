"""A zip made in memory from names and bytes, for the tests of what reads user code's zips."""

from __future__ import annotations

import io
import zipfile


def zipped(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return buffer.getvalue()
