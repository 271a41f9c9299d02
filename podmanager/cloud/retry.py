"""Client-side retries of transient API errors, for backends that do not retry themselves.

The real client (`gcp.py`) retries inside each call; the simulator is a server and raises
transient faults as a server would, so the provisioner talks to it through this wrapper.
"""

from __future__ import annotations

from typing import Any, Callable

import tenacity

from podmanager.clock import Clock, RealClock
from podmanager.cloud.errors import TransientError

# on_retry(method name, the error, attempt number): told before each retry.
RetryCallback = Callable[[str, BaseException, int], None]

_API_METHODS = frozenset({
    "create_node", "get_node", "list_nodes", "delete_node",
    "create_queued_resource", "list_queued_resources", "delete_queued_resource", "get_operation",
})


class RetryingCloud:
    """Wraps a `TpuCloud`: API methods retry `TransientError` with jittered backoff until a deadline."""

    def __init__(self, inner: Any, *, deadline_s: float = 60.0, clock: Clock | None = None,
                 on_retry: RetryCallback | None = None):
        self.inner = inner
        self.deadline_s = deadline_s
        self.clock = clock or RealClock()
        self.on_retry = on_retry

    @property
    def backend(self) -> str:
        return self.inner.backend

    @property
    def project(self) -> str:
        return self.inner.project

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.inner, name)
        if name not in _API_METHODS:
            return target
        return self._retrying(name, target)

    def _retrying(self, name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        started = self.clock.now()

        def out_of_time(state: tenacity.RetryCallState) -> bool:
            return self.clock.now() - started >= self.deadline_s

        def report(state: tenacity.RetryCallState) -> None:
            if self.on_retry and state.outcome is not None:
                self.on_retry(name, state.outcome.exception(), state.attempt_number)

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(TransientError),
            wait=tenacity.wait_exponential_jitter(multiplier=0.05, max=5.0, jitter=0.05),
            stop=out_of_time,
            sleep=self.clock.sleep,
            before_sleep=report,
            reraise=True,
        )

        def call_with_retries(*args: Any, **kwargs: Any) -> Any:
            try:
                return retrying(call, *args, **kwargs)
            except TransientError as last:
                if self.clock.now() - started < self.deadline_s:
                    raise
                raise TransientError(
                    f"gave up on {name} after {self.deadline_s:.0f}s of transient errors from the Cloud TPU API: {last}",
                    hint="The API may be degraded; run the same command again later (it resumes where it stopped).",
                ) from last

        return call_with_retries
