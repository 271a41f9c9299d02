"""Google's errors -> podmanager's error taxonomy, in one table and one function.

`map_google_error` serves both a failed call (a gRPC status with its details) and a failed
long-running operation (the `google.rpc.Status` in `Operation.error`): operation codes 8 and 9
mean no capacity and reservation shortfall; operation code 3 is told apart by its message
(`preempted_while_creating`): a spot slice preempted while it was created, or a truly invalid
request (a bad runtime version, ...) that no retry fixes. A RESOURCE_EXHAUSTED call with a
QuotaFailure is a quota (not retried), without one it is a rate limit (retried).
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from google.api_core import exceptions as google_exceptions
from google.rpc import code_pb2, error_details_pb2

from podmanager.cloud import errors as cloud_errors

AUTH_HINT = (
    "Authenticate with `gcloud auth application-default login` (or set GOOGLE_APPLICATION_CREDENTIALS to a "
    "service-account key file), or run without a cloud: add `--dry-run`, or start `podmanager emulator` and "
    "set TPU_EMULATOR_HOST=127.0.0.1:8470."
)

# Codes of a failed long-running operation that mean something specific for TPU creation.
_OPERATION_ERRORS: dict[int, type[cloud_errors.CloudError]] = {
    code_pb2.RESOURCE_EXHAUSTED: cloud_errors.CapacityError,  # 8: "There is no more capacity in the zone"
    code_pb2.FAILED_PRECONDITION: cloud_errors.ReservationShortfallError,  # 9
}

# Operation code 3 (INVALID_ARGUMENT) is what Cloud TPU sends both for a spot slice preempted
# while it was being created and for a request it refuses. The preemption has one known
# wording, which this keys on (as SkyPilot observed it, sky/backends/cloud_vm_ray_backend.py):
#   'Cloud TPU received a bad request. update is not supported while in state PREEMPTED [EID: 0x...]'
# Only "... in state PREEMPTED" makes it a preemption; every other code-3 message is an invalid
# request, reported after one try.
_PREEMPTED_WHILE_CREATING = re.compile(r"\bin state PREEMPTED\b")


def preempted_while_creating(message: str) -> bool:
    """Whether an operation's code-3 message is the preemption of a slice being created."""
    return bool(_PREEMPTED_WHILE_CREATING.search(message))

# Codes of a failed call (and of any other failed operation).
_CALL_ERRORS: dict[int, type[cloud_errors.CloudError]] = {
    code_pb2.NOT_FOUND: cloud_errors.NotFoundError,
    code_pb2.ALREADY_EXISTS: cloud_errors.AlreadyExistsError,
    code_pb2.PERMISSION_DENIED: cloud_errors.PermissionDeniedError,
    code_pb2.INVALID_ARGUMENT: cloud_errors.InvalidRequestError,
    code_pb2.FAILED_PRECONDITION: cloud_errors.InvalidRequestError,
    code_pb2.OUT_OF_RANGE: cloud_errors.InvalidRequestError,
    code_pb2.UNAUTHENTICATED: cloud_errors.AuthenticationError,
    code_pb2.UNAVAILABLE: cloud_errors.TransientError,
    code_pb2.DEADLINE_EXCEEDED: cloud_errors.TransientError,
}

_HINTS: dict[type[cloud_errors.CloudError], str] = {
    cloud_errors.AuthenticationError: AUTH_HINT,
    cloud_errors.PermissionDeniedError: "The account needs roles/tpu.admin on the project (and the Cloud TPU API enabled).",
    cloud_errors.CapacityError: "Try another zone, spot capacity, or a queued resource.",
    cloud_errors.InvalidRequestError: "The Cloud TPU API refused the request itself; retrying will not help. Check the "
                                      "slice's accelerator, runtime_version, reservation and zone in the spec.",
}

_TOO_LARGE = re.compile(r"(Received|Sent) message larger than max")  # gRPC's message-size limit
_RATE_WORDS = ("per minute", "per second", "per 100 seconds", "rate limit", "requests per")


def _quota_name(violation: error_details_pb2.QuotaFailure.Violation) -> str:
    return violation.quota_id or violation.quota_metric or violation.subject or violation.description or "unknown"


def map_google_error(code: int, message: str, details: Sequence[Any] = (), *, in_operation: bool = False,
                     caller: str | None = None) -> cloud_errors.CloudError:
    """One place where a Google error (a call's status or an operation's `error`) gets its type.

    `code` is the google.rpc code, `details` the unpacked status details (QuotaFailure, ...);
    `caller`: who made the call, when known (a dry run's), named by a permission's refusal.
    """
    if code == code_pb2.PERMISSION_DENIED:
        from podmanager.cloud.gcp.permissions import explain

        explained = explain(message, details, caller)
        if explained is not None:
            return explained
    violations = [v for d in details if isinstance(d, error_details_pb2.QuotaFailure) for v in d.violations]
    rate_limited = any(r.reason in ("RATE_LIMIT_EXCEEDED", "RATE_LIMITED") for r in details if isinstance(r, error_details_pb2.ErrorInfo))
    if code == code_pb2.RESOURCE_EXHAUSTED and violations and not rate_limited:
        described = " ".join(f"{v.description} {v.quota_metric}" for v in violations).lower()
        if not any(word in described for word in _RATE_WORDS):
            quota = _quota_name(violations[0])
            return cloud_errors.QuotaError(
                f"quota exhausted: {quota}: {message}",
                quota=quota,
                hint=f"Ask for more {quota} quota (https://console.cloud.google.com/iam-admin/quotas) or ask for fewer or smaller slices.",
            )
    if code == code_pb2.UNAVAILABLE and "metadata from plugin failed" in message:
        # gRPC reports credentials that cannot be refreshed as UNAVAILABLE; retrying will not help.
        return cloud_errors.AuthenticationError(f"Google Cloud credentials failed: {message}", hint=AUTH_HINT)
    if code == code_pb2.RESOURCE_EXHAUSTED and not in_operation and _TOO_LARGE.search(message):
        # gRPC's own limit on a received message, raised by the client: no server was asked to slow down.
        return cloud_errors.CloudError(
            f"the reply was too large for the client to receive: {message}",
            hint="A list reply this large means a page size the client should not have asked for; report it. "
                 "Retrying would get the same reply.")
    if code == code_pb2.RESOURCE_EXHAUSTED and not in_operation:
        if "capacity" in message.lower():
            return cloud_errors.CapacityError(message, hint=_HINTS[cloud_errors.CapacityError])
        return cloud_errors.TransientError(f"rate limited (RESOURCE_EXHAUSTED): {message}")
    kind = (_OPERATION_ERRORS.get(code) if in_operation else None) or _CALL_ERRORS.get(code, cloud_errors.CloudError)
    if in_operation and code == code_pb2.INVALID_ARGUMENT and preempted_while_creating(message):
        kind = cloud_errors.PreemptedWhileCreatingError
    name = code_pb2.Code.Name(code) if code in code_pb2.Code.values() else "UNKNOWN"
    label = f"operation error code {code}" if in_operation else name
    return kind(f"{message} ({label})" if message else label, hint=_HINTS.get(kind))


def map_call_error(error: google_exceptions.GoogleAPICallError, caller: str | None = None) -> cloud_errors.CloudError:
    if isinstance(error, google_exceptions.TooManyRequests):  # an HTTP 429 without a gRPC code
        code = code_pb2.RESOURCE_EXHAUSTED
    elif error.grpc_status_code is not None:
        code = error.grpc_status_code.value[0]
    else:
        code = code_pb2.UNKNOWN
    return map_google_error(code, error.message or "", list(error.details or ()), in_operation=False, caller=caller)


def unpack_details(details: Sequence[Any]) -> list[Any]:
    unpacked: list[Any] = []
    for detail in details:
        for kind in (error_details_pb2.QuotaFailure, error_details_pb2.ErrorInfo):
            if detail.Is(kind.DESCRIPTOR):
                message = kind()
                detail.Unpack(message)
                unpacked.append(message)
                break
        else:
            unpacked.append(detail)
    return unpacked
