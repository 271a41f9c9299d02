"""Cloud Storage's download route over the simulated buckets, so a simulated VM's startup script
fetches podmanager's staged wheel the way it would from Google.

`GET /storage/v1/b/<bucket>/o/<object, URL-encoded>?alt=media` with any `Authorization: Bearer
...` (401 without) answers the object's bytes from `$PODMANAGER_HOME/sim/storage/<bucket>/<object>`
(`core/paths.storage_object`, where `controller/staging.py` puts a dry run's wheel), and 404 with
Google's "No such object" when there is none. Only downloads are served: listing, metadata and
uploads go through the staging code, not through this route.
"""

from __future__ import annotations

import re
from typing import Mapping
from urllib.parse import parse_qs, unquote, urlsplit

from podmanager.core import paths
from podmanager.emulator import rest

# The object's name is one path segment: its '/'s are sent as %2F, so match before decoding.
_DOWNLOAD = re.compile(r"^/storage/v1/b/(?P<bucket>[^/]+)/o/(?P<object>[^/]+)$")


def download(path: str, headers: Mapping[str, str]) -> rest.Answer | None:
    """A `rest.Route`: the object's bytes, or Google's error; None for a path not under /storage/."""
    parts = urlsplit(path)
    match = _DOWNLOAD.match(parts.path)
    if match is None:
        return None if not parts.path.startswith("/storage/") else rest.error_answer(
            404, "NOT_FOUND", f"no such route: GET {path} (the emulator serves only object downloads)")
    refused = rest.unauthenticated(headers)
    if refused is not None:
        return refused
    if parse_qs(parts.query).get("alt") != ["media"]:
        return rest.error_answer(400, "INVALID_ARGUMENT", "the emulator serves only an object's bytes: add ?alt=media")
    bucket, name = unquote(match["bucket"]), unquote(match["object"])
    try:
        data = paths.storage_object(bucket, name).read_bytes()
    except ValueError as bad:
        return rest.error_answer(400, "INVALID_ARGUMENT", str(bad))
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return rest.error_answer(404, "NOT_FOUND", f"No such object: {bucket}/{name}")
    return rest.Answer(200, data, content_type="application/octet-stream")
