"""One Google API call with a timeout, its transient errors retried with jittered backoff
until a deadline — shared by the Cloud TPU and Secret Manager clients, whose methods have
no retry or timeout of their own."""

from __future__ import annotations

from typing import Any, Callable, TypeVar

import tenacity
from google.api_core import exceptions as google_exceptions

from podmanager.cloud import errors as cloud_errors
from podmanager.cloud.retry import transient_retries
from podmanager.core.clock import Clock

T = TypeVar("T")


def call_google(what: str, method: Callable[..., T], request: dict[str, Any], *, service: str, clock: Clock,
                call_timeout_s: float, retry_deadline_s: float, retry_initial_s: float, retry_max_s: float,
                map_error: Callable[[google_exceptions.GoogleAPICallError], cloud_errors.CloudError],
                on_retry: Callable[[str, BaseException, int], None] | None = None) -> T:
    """`method(request=..., retry=None, timeout=...)`; errors become the taxonomy's via
    `map_error`, and `TransientError`s are tried again until `retry_deadline_s`."""
    start = clock.now()
    retrying = transient_retries(what, clock=clock, deadline_s=retry_deadline_s, initial_s=retry_initial_s,
                                 max_s=retry_max_s, on_retry=on_retry)
    try:
        for attempt in retrying:
            with attempt:
                try:
                    return method(request=request, retry=None, timeout=call_timeout_s)
                except google_exceptions.GoogleAPICallError as error:
                    raise map_error(error) from error
    except tenacity.RetryError as gave_up:
        last = gave_up.last_attempt.exception()
        raise cloud_errors.TransientError(
            f"{what} failed: {service} kept answering with transient errors for {clock.now() - start:.1f}s "
            f"({gave_up.last_attempt.attempt_number} attempts); gave up at the {retry_deadline_s:g}s retry deadline. "
            f"Last error: {last}",
            hint=f"{service[:1].upper()}{service[1:]} is unavailable or rate-limiting this project; run the command "
                 "again later.",
        ) from last
    raise AssertionError("unreachable: tenacity either returns or raises")
