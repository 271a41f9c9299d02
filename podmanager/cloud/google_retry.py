"""One Google API call with a timeout, its transient errors retried with jittered backoff
until a deadline — shared by the Cloud TPU and Secret Manager clients, whose methods have
no retry or timeout of their own."""

from __future__ import annotations

from typing import Any, Callable, TypeVar

import tenacity
from google.api_core import exceptions as google_exceptions

from podmanager.clock import Clock
from podmanager.cloud import errors as cloud_errors

T = TypeVar("T")


def call_google(what: str, method: Callable[..., T], request: dict[str, Any], *, service: str, clock: Clock,
                call_timeout_s: float, retry_deadline_s: float, retry_initial_s: float, retry_max_s: float,
                map_error: Callable[[google_exceptions.GoogleAPICallError], cloud_errors.CloudError],
                on_retry: Callable[[str, BaseException, int], None] | None = None) -> T:
    """`method(request=..., retry=None, timeout=...)`; errors become the taxonomy's via
    `map_error`, and `TransientError`s are tried again until `retry_deadline_s`."""
    start = clock.now()

    def past_deadline(state: tenacity.RetryCallState) -> bool:
        return clock.now() - start + state.upcoming_sleep > retry_deadline_s

    def report(state: tenacity.RetryCallState) -> None:
        if on_retry is not None and state.outcome is not None:
            on_retry(what, state.outcome.exception(), state.attempt_number)

    retrying = tenacity.Retrying(
        stop=past_deadline,
        wait=tenacity.wait_random_exponential(multiplier=retry_initial_s, max=retry_max_s),
        retry=tenacity.retry_if_exception_type(cloud_errors.TransientError),
        sleep=clock.sleep,
        before_sleep=report,
    )
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
            hint=f"The {service} API is unavailable or rate-limiting this project; run the command again later.",
        ) from last
    raise AssertionError("unreachable: tenacity either returns or raises")
