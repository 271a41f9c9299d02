"""One error taxonomy for every cloud backend.

The real backend maps Google's errors onto these; the simulator raises them directly.
The provisioner acts on the type: capacity -> next zone, quota -> stop, transient -> retry.
"""

from __future__ import annotations

from podmanager.core.errors import PodmanagerError


class CloudError(PodmanagerError):
    """A Cloud TPU API call or long-running operation failed."""


class CapacityError(CloudError):
    """The zone has no capacity for this accelerator right now (operation code 8)."""


class ReservationShortfallError(CloudError):
    """The reservation has fewer free chips than requested (operation code 9)."""


class PreemptedWhileCreatingError(CloudError):
    """A spot/preemptible slice was preempted before it became READY (operation code 3 with the
    message '... not supported while in state PREEMPTED'; see `gcp/errors.py`)."""


class QuotaError(CloudError):
    """A project quota is exhausted; retrying will not help until the quota is raised."""

    def __init__(self, message: str, *, quota: str = "unknown", hint: str | None = None):
        super().__init__(message, hint=hint)
        self.quota = quota


class TransientError(CloudError):
    """UNAVAILABLE, DEADLINE_EXCEEDED or a rate limit: the same call may succeed later."""


class NotFoundError(CloudError):
    """The node, queued resource or operation does not exist."""


class AlreadyExistsError(CloudError):
    """A node or queued resource with this name exists already."""


class PermissionDeniedError(CloudError):
    """The credentials may not do this; names the permission when the API does."""


class InvalidRequestError(CloudError):
    """The API rejected the request as malformed (wrong runtime version, zone, ...): bad input,
    which no retry fixes (a call's INVALID_ARGUMENT, or an operation's code 3 that is not a
    preemption)."""

    exit_code = 2


class AuthenticationError(CloudError):
    """No usable credentials."""
