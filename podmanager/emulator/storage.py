"""Cloud Storage's download route over the simulated buckets, so a simulated VM's startup script
fetches podmanager's staged wheel the way it would from Google.

`GET /storage/v1/b/<bucket>/o/<object, URL-encoded>?alt=media` with any `Authorization: Bearer
...` (401 without) answers the object's bytes from `$PODMANAGER_HOME/sim/storage/<bucket>/<object>`
(`core/paths.storage_object`, where `controller/staging.py` puts a dry run's wheel), and 404 with
Google's "No such object" when there is none. Of objects only downloads are served: listing,
metadata and uploads go through the staging code, not through this route.

`BucketApi` serves the bucket calls the preflight of `up` makes, over the simulated project's
buckets (`sim/storage.py`), in the JSON API's shapes: `GET /storage/v1/b/BUCKET`, its IAM policy
(`GET` and `PUT .../iam`) and `GET .../iam/testPermissions?permissions=...` (the caller's).
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping
from urllib.parse import parse_qs, unquote, urlsplit

from pydantic import ValidationError

from podmanager.cloud import errors as cloud_errors
from podmanager.cloud.buckets import SET_POLICY_PERMISSION, BucketPolicy
from podmanager.core import paths
from podmanager.emulator import rest
from podmanager.emulator.sim.cloud import SIMULATED_PROJECT_NUMBER, SimCloud
from podmanager.emulator.sim.storage import StaleEtagError

# The object's name is one path segment: its '/'s are sent as %2F, so match before decoding.
_DOWNLOAD = re.compile(r"^/storage/v1/b/(?P<bucket>[^/]+)/o/(?P<object>[^/]+)$")


def download(path: str, headers: Mapping[str, str]) -> rest.Answer | None:
    """A `rest.Route`: the object's bytes, or Google's error; None for a path not under /storage/."""
    parts = urlsplit(path)
    match = _DOWNLOAD.match(parts.path)
    if match is None:
        return None  # a bucket's own calls (`BucketApi`), or no route at all
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


_BUCKET = re.compile(r"^/storage/v1/b/(?P<bucket>[^/]+)(?P<iam>/iam(?P<test>/testPermissions)?)?$")
_HTTP = {StaleEtagError: (412, "FAILED_PRECONDITION"), cloud_errors.NotFoundError: (404, "NOT_FOUND"),
         cloud_errors.AlreadyExistsError: (409, "ALREADY_EXISTS"),
         cloud_errors.PermissionDeniedError: (403, "PERMISSION_DENIED")}


class BucketApi:
    """A `rest.RequestRoute` over `sim`'s buckets."""

    def __init__(self, sim: SimCloud):
        self.sim = sim

    def __call__(self, request: rest.Request) -> rest.Answer | None:
        parts = urlsplit(request.path)
        match = _BUCKET.match(parts.path)
        if match is None:
            return None
        refused = rest.unauthenticated(request.headers)
        if refused is not None:
            return refused
        bucket = unquote(match["bucket"])
        try:
            with self.sim.storage() as storage:
                if request.method == "GET" and match["test"]:
                    asked = parse_qs(parts.query).get("permissions", [])
                    # The caller holds every permission but the IAM change a test may deny it.
                    granted = [p for p in asked if p != SET_POLICY_PERMISSION or storage.may_set_policy(bucket)]
                    return rest.json_answer(200, {"kind": "storage#testIamPermissionsResponse",
                                                  "permissions": granted})
                if request.method == "GET" and match["iam"]:
                    return rest.json_answer(200, _policy_json(bucket, storage.bucket(bucket)))
                if request.method == "PUT" and match["iam"]:
                    written = storage.set_policy(bucket, BucketPolicy.model_validate(json.loads(request.body)))
                    return rest.json_answer(200, _policy_json(bucket, written))
                if request.method == "GET":
                    storage.bucket(bucket)
                    return rest.json_answer(200, {"kind": "storage#bucket", "id": bucket, "name": bucket,
                                                  "projectNumber": SIMULATED_PROJECT_NUMBER})
        except cloud_errors.CloudError as error:
            status, code = next((v for k, v in _HTTP.items() if isinstance(error, k)), (500, "INTERNAL"))
            return rest.error_answer(status, code, error.message)
        except (ValueError, ValidationError) as bad:
            return rest.error_answer(400, "INVALID_ARGUMENT", f"malformed policy: {bad}")
        return rest.error_answer(405, "METHOD_NOT_ALLOWED", f"the emulator does not serve {request.method} {parts.path}")


def _policy_json(bucket: str, policy: BucketPolicy) -> dict[str, Any]:
    return {"kind": "storage#policy", "resourceId": f"projects/_/buckets/{bucket}",
            **policy.model_dump(mode="json", exclude_none=True)}
