"""map_google_error: one table from Google's codes and details to the error taxonomy."""

from __future__ import annotations

import pytest
from google.api_core import exceptions as google_exceptions
from google.rpc import code_pb2, error_details_pb2

from podmanager.cloud import errors
from podmanager.cloud.gcp.errors import map_call_error, map_google_error


def quota_failure(description: str, quota_id: str = "", subject: str = "") -> error_details_pb2.QuotaFailure:
    return error_details_pb2.QuotaFailure(
        violations=[error_details_pb2.QuotaFailure.Violation(description=description, quota_id=quota_id, subject=subject)]
    )


@pytest.mark.parametrize(
    ("code", "in_operation", "expected"),
    [
        (code_pb2.RESOURCE_EXHAUSTED, True, errors.CapacityError),
        (code_pb2.FAILED_PRECONDITION, True, errors.ReservationShortfallError),
        (code_pb2.INVALID_ARGUMENT, True, errors.InvalidRequestError),  # code 3 without the preemption's words
        (code_pb2.NOT_FOUND, True, errors.NotFoundError),
        (code_pb2.INTERNAL, True, errors.CloudError),
        (code_pb2.NOT_FOUND, False, errors.NotFoundError),
        (code_pb2.ALREADY_EXISTS, False, errors.AlreadyExistsError),
        (code_pb2.PERMISSION_DENIED, False, errors.PermissionDeniedError),
        (code_pb2.INVALID_ARGUMENT, False, errors.InvalidRequestError),
        (code_pb2.FAILED_PRECONDITION, False, errors.InvalidRequestError),
        (code_pb2.UNAUTHENTICATED, False, errors.AuthenticationError),
        (code_pb2.UNAVAILABLE, False, errors.TransientError),
        (code_pb2.DEADLINE_EXCEEDED, False, errors.TransientError),
        (code_pb2.RESOURCE_EXHAUSTED, False, errors.TransientError),  # a rate limit, not a quota failure
    ],
)
def test_codes_map_to_the_taxonomy(code: int, in_operation: bool, expected: type[errors.CloudError]) -> None:
    assert type(map_google_error(code, "boom", in_operation=in_operation)) is expected


def test_quota_failure_names_the_quota() -> None:
    error = map_google_error(
        code_pb2.RESOURCE_EXHAUSTED, "Quota exceeded", [quota_failure("TPU v4 chips exhausted", quota_id="TPUV4ChipsPerZone")]
    )
    assert isinstance(error, errors.QuotaError) and error.quota == "TPUV4ChipsPerZone"
    assert "TPUV4ChipsPerZone" in str(error) and error.hint


def test_quota_failure_without_an_id_falls_back_to_subject_then_description() -> None:
    by_subject = map_google_error(code_pb2.RESOURCE_EXHAUSTED, "q", [quota_failure("d", subject="project:123")])
    by_description = map_google_error(code_pb2.RESOURCE_EXHAUSTED, "q", [quota_failure("TPU chips per zone")])
    assert (by_subject.quota, by_description.quota) == ("project:123", "TPU chips per zone")  # type: ignore[attr-defined]


def test_per_minute_request_quota_is_a_rate_limit() -> None:
    details = [quota_failure("Quota exceeded for quota metric 'Requests' and limit 'Requests per minute'")]
    assert type(map_google_error(code_pb2.RESOURCE_EXHAUSTED, "429", details)) is errors.TransientError


def test_rate_limit_error_info_is_transient() -> None:
    details = [quota_failure("x", quota_id="Q"), error_details_pb2.ErrorInfo(reason="RATE_LIMIT_EXCEEDED")]
    assert type(map_google_error(code_pb2.RESOURCE_EXHAUSTED, "429", details)) is errors.TransientError


def test_synchronous_no_more_capacity_is_a_capacity_error() -> None:
    error = map_google_error(code_pb2.RESOURCE_EXHAUSTED, "There is no more capacity in the zone")
    assert type(error) is errors.CapacityError


def test_client_exceptions_are_mapped() -> None:
    assert type(map_call_error(google_exceptions.ServiceUnavailable("down"))) is errors.TransientError
    assert type(map_call_error(google_exceptions.TooManyRequests("slow down"))) is errors.TransientError
    assert type(map_call_error(google_exceptions.NotFound("gone"))) is errors.NotFoundError
    assert type(map_call_error(google_exceptions.Unauthenticated("who"))) is errors.AuthenticationError
    quota = map_call_error(google_exceptions.ResourceExhausted("q", details=[quota_failure("d", quota_id="Q1")]))
    assert isinstance(quota, errors.QuotaError) and quota.quota == "Q1"


def test_credentials_that_cannot_refresh_are_not_retried_as_unavailable() -> None:
    message = "Getting metadata from plugin failed with error: ('invalid_grant: Bad Request')"
    error = map_google_error(code_pb2.UNAVAILABLE, message)
    assert type(error) is errors.AuthenticationError and "gcloud auth application-default login" in str(error)


def test_operation_code_3_is_a_preemption_only_with_its_message() -> None:
    preempted = "Cloud TPU received a bad request. update is not supported while in state PREEMPTED [EID: 0x73]"
    assert type(map_google_error(code_pb2.INVALID_ARGUMENT, preempted, in_operation=True)) is errors.PreemptedWhileCreatingError
    invalid = map_google_error(code_pb2.INVALID_ARGUMENT, "Cloud TPU received a bad request. runtime version "
                               "'tpu-nope' is not supported", in_operation=True)
    assert type(invalid) is errors.InvalidRequestError and invalid.exit_code == 2
    assert "tpu-nope" in str(invalid) and "retrying will not help" in str(invalid)
    # The same words in a call's status (not an operation) are still an invalid request.
    assert type(map_google_error(code_pb2.INVALID_ARGUMENT, preempted)) is errors.InvalidRequestError


def test_a_rest_calls_service_disabled_is_named_like_a_grpc_calls():
    # A REST error's details are JSON objects (https://cloud.google.com/apis/design/errors#error_info).
    from podmanager.cloud.gcp.permissions import ServiceDisabledError, explain

    url = "https://console.developers.google.com/apis/api/compute.googleapis.com/overview?project=123"
    detail = {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "SERVICE_DISABLED",
              "domain": "googleapis.com", "metadata": {"service": "compute.googleapis.com",
                                                      "consumer": "projects/123", "activationUrl": url}}
    explained = explain("Compute Engine API has not been used in project 123 before or it is disabled.", [detail],
                        None)
    assert isinstance(explained, ServiceDisabledError) and explained.exit_code == 2
    assert url in explained.message and "gcloud services enable compute.googleapis.com" in (explained.hint or "")
