"""Client-side retries of transient API errors, for backends that do not retry themselves.

The real client (`gcp/client.py`) retries inside each call; the simulator is a server and raises
transient faults as a server would, so the provisioner talks to it through this wrapper.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

import tenacity

from podmanager.cloud.base import (
    GuestAttribute,
    Node,
    NodeRequest,
    Operation,
    QueuedResource,
    TpuCloud,
)
from podmanager.cloud.errors import TransientError
from podmanager.core.clock import Clock, RealClock

T = TypeVar("T")

# on_retry(method name, the error, attempt number): told before each retry.
RetryCallback = Callable[[str, BaseException, int], None]


class RetryingCloud:
    """A `TpuCloud` whose calls retry `TransientError` with jittered backoff until a deadline."""

    def __init__(self, inner: TpuCloud, *, deadline_s: float = 60.0, clock: Clock | None = None,
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

    def create_node(self, zone: str, node_id: str, request: NodeRequest) -> Operation:
        return self._call("create_node", self.inner.create_node, zone, node_id, request)

    def get_node(self, zone: str, node_id: str) -> Node:
        return self._call("get_node", self.inner.get_node, zone, node_id)

    def list_nodes(self, zone: str) -> list[Node]:
        return self._call("list_nodes", self.inner.list_nodes, zone)

    def delete_node(self, zone: str, node_id: str) -> Operation:
        return self._call("delete_node", self.inner.delete_node, zone, node_id)

    def update_node_metadata(self, zone: str, node_id: str, metadata: dict[str, str]) -> Operation:
        return self._call("update_node_metadata", self.inner.update_node_metadata, zone, node_id, metadata)

    def guest_attributes(self, zone: str, node_id: str, query_path: str = "",
                         worker: int | None = None) -> list[GuestAttribute]:
        return self._call("guest_attributes", self.inner.guest_attributes, zone, node_id, query_path, worker)

    def create_queued_resource(self, zone: str, qr_id: str, node_id: str, request: NodeRequest) -> Operation:
        return self._call("create_queued_resource", self.inner.create_queued_resource, zone, qr_id, node_id, request)

    def list_queued_resources(self, zone: str) -> list[QueuedResource]:
        return self._call("list_queued_resources", self.inner.list_queued_resources, zone)

    def delete_queued_resource(self, zone: str, qr_id: str) -> Operation:
        return self._call("delete_queued_resource", self.inner.delete_queued_resource, zone, qr_id)

    def get_operation(self, name: str) -> Operation:
        return self._call("get_operation", self.inner.get_operation, name)

    def _call(self, name: str, call: Callable[..., T], *args: Any) -> T:
        retrying = transient_retries(name, clock=self.clock, deadline_s=self.deadline_s, initial_s=0.05, max_s=5.0,
                                     on_retry=self.on_retry)
        try:
            return retrying(call, *args)
        except tenacity.RetryError as gave_up:
            last = gave_up.last_attempt.exception()
            raise TransientError(
                f"gave up on {name} after {self.deadline_s:.0f}s of transient errors from the Cloud TPU API: {last}",
                hint="The API may be degraded; run the same command again later (it resumes where it stopped).",
            ) from last


def transient_retries(what: str, *, clock: Clock, deadline_s: float, initial_s: float, max_s: float,
                      on_retry: RetryCallback | None = None) -> tenacity.Retrying:
    """The one retry policy for cloud calls: `TransientError`s are tried again after a jittered
    exponential wait (from `initial_s`, at most `max_s`) until the next wait would pass
    `deadline_s`; then tenacity's RetryError (the caller says what giving up means). Waits go
    through `clock`, so tests take no wall time; `on_retry` hears of each retry."""
    started = clock.now()

    def past_deadline(state: tenacity.RetryCallState) -> bool:
        return clock.now() - started + (state.upcoming_sleep or 0.0) > deadline_s

    def report(state: tenacity.RetryCallState) -> None:
        if on_retry is not None and state.outcome is not None:
            on_retry(what, state.outcome.exception(), state.attempt_number)

    return tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(TransientError),
        wait=tenacity.wait_random_exponential(multiplier=initial_s, max=max_s),
        stop=past_deadline,
        sleep=clock.sleep,
        before_sleep=report,
    )
