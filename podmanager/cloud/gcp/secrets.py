"""The cluster's Ray token in Secret Manager: written by `up`, read by every TPU VM at boot.

The startup script (`controller/startup.py`) names the secret `token_secret_id(cluster)` and reads its
`latest` version with the VM's service account; `TokenSecrets` creates that secret and
keeps its latest version equal to the head's token.

- `ensure` is level-triggered: it reads what `latest` holds first, creates the secret only when
  there is none (ALREADY_EXISTS counts as success), and adds a version only when `latest`
  differs (or is disabled, destroyed or absent), so running `up` again adds nothing, and a
  controller VM whose account may use the secret but not make secrets never asks to.
- `grant_access` gives the TPU VMs' service account `roles/secretmanager.secretAccessor` on
  the secret (read, add the binding if missing, write back with the read etag; once more on
  ABORTED, a concurrent change). With no account named, it is the project's default compute
  service account, PROJECT_NUMBER-compute@developer.gserviceaccount.com; the number comes from
  the secret's own resource name, which Secret Manager returns as projects/NUMBER/secrets/ID,
  so no other API (Resource Manager) and no other role is needed.
- `delete` treats NOT_FOUND as success, so `down` is safe twice.
- Every call has a timeout; UNAVAILABLE and DEADLINE_EXCEEDED are retried with jittered
  exponential backoff until a deadline, as in `gcp/client.py`. Errors are mapped by
  `gcp_errors.map_call_error`; PERMISSION_DENIED gets a message naming the roles needed.
- The token is never logged, never kept on the object, and never in an exception's text:
  should a server echo it, the error is re-raised with it redacted and without its chain.
"""

from __future__ import annotations

import copy
import hmac
import re
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from google.api_core import exceptions as google_exceptions
from google.cloud.secretmanager_v1 import SecretManagerServiceClient
from google.cloud.secretmanager_v1.services.secret_manager_service.transports import (
    SecretManagerServiceGrpcTransport,
)
from google.cloud.secretmanager_v1.types import resources
from google.iam.v1 import options_pb2, policy_pb2

from podmanager.cloud import errors as cloud_errors
from podmanager.cloud.base import CLUSTER_LABEL
from podmanager.cloud.checksum import crc32c
from podmanager.cloud.gcp.calls import call_google
from podmanager.cloud.gcp.errors import map_call_error
from podmanager.cloud.gcp.permissions import (
    MissingPermissionError,
    ServiceDisabledError,
)
from podmanager.core.clock import Clock, RealClock

T = TypeVar("T")

MAX_PAYLOAD_BYTES = 64 * 1024  # Secret Manager's limit on one version's data
REDACTED = "<redacted>"
ACCESSOR_ROLE = "roles/secretmanager.secretAccessor"
_NUMBERED = re.compile(r"^projects/(?P<number>\d+)/secrets/")

PERMISSION_HINT = (
    "The account running `podmanager up`/`down` needs roles/secretmanager.admin on the project (or on the "
    "secret) to create, update and delete the cluster's Ray-token secret; the TPU VMs' service account needs "
    "roles/secretmanager.secretAccessor on it to read the token at boot. If the Secret Manager API is not "
    "enabled yet: `gcloud services enable secretmanager.googleapis.com --project {project}`."
)


# ---------------------------------------------------------------------- redaction

def _chain(error: BaseException) -> list[BaseException]:
    """The error and every error it was raised from or during."""
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and not any(current is s for s in seen):
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _mentions(error: BaseException, secret: str) -> bool:
    return any(secret in str(e) or secret in repr(e) for e in _chain(error))


def _redacted(error: cloud_errors.CloudError, secret: str) -> cloud_errors.CloudError:
    """A copy of `error` with `secret` blanked out of its text and no chain to the original."""
    clean = copy.copy(error)
    clean.message = error.message.replace(secret, REDACTED)
    clean.hint = error.hint.replace(secret, REDACTED) if error.hint else error.hint
    clean.args = (clean.message,)
    clean.__cause__ = None
    clean.__context__ = None
    clean.__suppress_context__ = True
    clean.__traceback__ = None
    return clean


def token_secret_id(cluster: str) -> str:
    """The Secret Manager secret that holds a cluster's Ray token (README: one per cluster)."""
    return f"podmanager-{cluster}-ray-token"


def channel_secret_id(cluster: str) -> str:
    """The secret that holds a cluster's channel token (its controller VM reads it at boot)."""
    return f"podmanager-{cluster}-channel-token"


def default_compute_account(project_number: str) -> str:
    """The project's default compute service account: what a TPU VM runs as unless told otherwise."""
    return f"{project_number}-compute@developer.gserviceaccount.com"


def grant_command(secret: str, project: str, member: str) -> str:
    """The gcloud command that grants `member` read access to the secret by hand."""
    return (f"gcloud secrets add-iam-policy-binding {secret.rsplit('/', 1)[-1]} --project {project} "
            f"--member {member} --role {ACCESSOR_ROLE}")


@dataclass(frozen=True)
class SecretAccess:
    """What `grant_access` did: `member` may read the secret (`added`: by this call), or, with
    `member` None, nothing was granted, for `reason`."""

    member: str | None
    added: bool = False
    reason: str = ""


# ---------------------------------------------------------------------- the store


class TokenSecrets:
    """Creates, updates and deletes the Secret Manager secret that holds a cluster's Ray token.

    project: the Google Cloud project (id) that holds the secrets.
    client: a `SecretManagerServiceClient` to use; default: a new client on an insecure channel
      to the emulator when there is one (`emulator_host`, default $TPU_EMULATOR_HOST: the
      `podmanager emulator` serves Secret Manager on the same port as Cloud TPU, as `GcpCloud`
      finds it), else with `credentials`, or Application Default Credentials (else
      AuthenticationError at once, as `gcp.check_credentials` does).
    call_timeout_s: timeout of every single call. retry_deadline_s: how long transient errors
      are retried (backoff: full jitter, retry_initial_s doubling up to retry_max_s).
    clock: time and sleep for the backoff (a FakeClock in tests).
    on_retry(what, error, attempt): told before each retry; neither argument holds the token.
    """

    def __init__(
        self,
        project: str,
        *,
        client: SecretManagerServiceClient | None = None,
        emulator_host: str | None = None,
        credentials: Any = None,
        call_timeout_s: float = 30.0,
        retry_deadline_s: float = 120.0,
        retry_initial_s: float = 1.0,
        retry_max_s: float = 30.0,
        clock: Clock | None = None,
        on_retry: Callable[[str, BaseException, int], None] | None = None,
        secret_id: Callable[[str], str] = token_secret_id,
    ):
        """`secret_id(cluster)`: the secret's id (default: the Ray token's; the channel's token
        is kept the same way, `channel_secret_id`)."""
        self.project = project
        self.secret_id = secret_id
        self.call_timeout_s = call_timeout_s
        self.retry_deadline_s = retry_deadline_s
        self.retry_initial_s = retry_initial_s
        self.retry_max_s = retry_max_s
        self.clock = clock or RealClock()
        self.on_retry = on_retry
        self._owns_client = client is None
        self.caller: str | None = None  # who calls, named in a refusal (a dry run's)
        from podmanager.cloud.gcp.client import emulator_address

        if client is None and emulator_address(emulator_host):
            from podmanager.cloud.gcp.emulator_identity import principal

            self.caller = principal()
        self._client = client or self._new_client(project, emulator_host, credentials)

    @staticmethod
    def _new_client(project: str, emulator_host: str | None, credentials: Any) -> SecretManagerServiceClient:
        from podmanager.cloud.gcp.client import check_credentials, emulator_address

        address = emulator_address(emulator_host)
        if address:  # plain gRPC with the caller's emulator token, as GcpCloud talks to the emulator
            from podmanager.cloud.gcp.emulator_identity import insecure_channel

            return SecretManagerServiceClient(
                transport=SecretManagerServiceGrpcTransport(channel=insecure_channel(address)))
        return SecretManagerServiceClient(credentials=credentials or check_credentials(project))

    def close(self) -> None:
        """Close the client's channel if this object made the client."""
        if self._owns_client:
            self._client.transport.close()

    def __enter__(self) -> TokenSecrets:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def secret_name(self, cluster: str) -> str:
        """projects/<project>/secrets/podmanager-<cluster>-ray-token."""
        return f"projects/{self.project}/secrets/{self.secret_id(cluster)}"

    # ------------------------------------------------------------------ the verbs

    def ensure(self, cluster: str, token: str) -> str:
        """Make the cluster's secret exist with `token` as its latest version; its resource name.

        Creates the secret (automatic replication, label podmanager-cluster=<cluster>) unless it
        exists, and adds a version only if `latest` (what the VMs read) is missing, not enabled,
        or holds something else. A transient error retried after the server had already added
        the version may leave two equal versions, which is harmless.
        """
        if not token:
            raise ValueError("the Ray token is empty")
        data = token.encode()
        if len(data) > MAX_PAYLOAD_BYTES:
            raise ValueError(f"the Ray token is {len(data)} bytes; Secret Manager holds at most {MAX_PAYLOAD_BYTES}")
        leaked: cloud_errors.CloudError | None = None
        try:
            return self._ensure(cluster, token)
        except cloud_errors.CloudError as error:
            if not _mentions(error, token):
                raise
            leaked = error
        raise _redacted(leaked, token)  # outside the handler: no __context__ pointing back at the original

    def grant_access(self, cluster: str, service_account: str | None = None, *,
                     role: str = ACCESSOR_ROLE) -> SecretAccess:
        """Let `service_account` (an email; None: the project's default compute service account)
        read the cluster's secret: roles/secretmanager.secretAccessor on the secret itself (or
        `role`: the controller VM's account keeps the secret it reads and rewrites).

        Adds the binding only when the account lacks it, so running `up` again writes nothing.
        The write carries the etag of the read, so a concurrent change of the policy is never
        overwritten: the service answers ABORTED and the whole read-modify-write runs once more.
        Without a number in the secret's name (an emulator that keeps project ids), the default
        account cannot be named: nothing is granted and the result says why.
        """
        name = self.secret_name(cluster)
        if service_account is None:
            secret = self._call(f"read secret {name}", self._client.get_secret, name=name)
            numbered = _NUMBERED.match(secret.name)
            if numbered is None:
                return SecretAccess(None, reason=f"Secret Manager names the secret {secret.name}, without the "
                                    "project's number, so the default compute service account is unknown")
            service_account = default_compute_account(numbered["number"])
        member = f"serviceAccount:{service_account}"
        for attempt in (1, 2):
            try:
                return self._bind(name, member, role)
            except cloud_errors.CloudError as error:
                if attempt == 2 or not isinstance(error.__cause__, google_exceptions.Aborted):
                    raise
        raise AssertionError("unreachable: the second attempt returns or raises")

    def take_back(self, cluster: str, grants: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """Each (role, member) bound without a condition on the cluster's secret removed (a role an
        earlier podmanager granted that a narrower one replaces); the pairs removed. A stale etag
        (ABORTED) reads the policy again once, as `grant_access` does."""
        name = self.secret_name(cluster)
        for attempt in (1, 2):
            try:
                return self._unbind(name, grants)
            except cloud_errors.CloudError as error:
                if attempt == 2 or not isinstance(error.__cause__, google_exceptions.Aborted):
                    raise
        raise AssertionError("unreachable: the second attempt returns or raises")

    def _unbind(self, name: str, grants: list[tuple[str, str]]) -> list[tuple[str, str]]:
        policy = self._call(f"read the IAM policy of secret {name}", self._client.get_iam_policy, resource=name,
                            options=options_pb2.GetPolicyOptions(requested_policy_version=3))
        removed = []
        for binding in policy.bindings:
            for role, member in grants:
                if binding.role == role and not binding.HasField("condition") and member in binding.members:
                    binding.members.remove(member)
                    removed.append((role, member))
        if removed:
            kept = [b for b in policy.bindings if b.members]
            del policy.bindings[:]
            policy.bindings.extend(kept)
            self._call(f"take back {removed} on secret {name}", self._client.set_iam_policy, resource=name,
                       policy=policy)
        return removed

    def _bind(self, name: str, member: str, role: str = ACCESSOR_ROLE) -> SecretAccess:
        """One read-modify-write of the secret's IAM policy."""
        # Version 3: a policy with conditional bindings is read whole, so writing it back loses none.
        policy = self._call(f"read the IAM policy of secret {name}", self._client.get_iam_policy, resource=name,
                            options=options_pb2.GetPolicyOptions(requested_policy_version=3))
        unconditional = [b for b in policy.bindings if b.role == role and not b.HasField("condition")]
        if any(member in binding.members for binding in unconditional):
            return SecretAccess(member)
        if unconditional:
            unconditional[0].members.append(member)
        else:
            policy.bindings.append(policy_pb2.Binding(role=role, members=[member]))
        try:
            self._call(f"grant {member} read access to secret {name}", self._client.set_iam_policy,
                       resource=name, policy=policy)
        except cloud_errors.InvalidRequestError as error:  # e.g. no such service account
            raise cloud_errors.InvalidRequestError(
                error.message, hint=f"Is {member.split(':', 1)[1]} a service account of this project? Name the "
                "TPU VMs' account in the spec's network.service_account (left out: the project's default "
                "compute service account).") from error
        return SecretAccess(member, added=True)

    def read(self, cluster: str) -> str | None:
        """The latest version of the cluster's secret (None: there is none), for a second machine
        of the user (`podmanager connect`): never logged, never in an error's text."""
        name = self.secret_name(cluster)
        try:
            response = self._call(f"read the latest version of secret {name}", self._client.access_secret_version,
                                  name=f"{name}/versions/latest")
        except cloud_errors.NotFoundError:
            return None
        payload = response.payload
        if "data_crc32c" in payload and payload.data_crc32c != crc32c(payload.data):
            raise cloud_errors.CloudError(f"secret {name} was damaged in transit; try again")
        return payload.data.decode()

    def delete(self, cluster: str) -> None:
        """Delete the cluster's secret and all its versions; a secret already gone is success."""
        name = self.secret_name(cluster)
        try:
            self._call(f"delete secret {name}", self._client.delete_secret, name=name)
        except cloud_errors.NotFoundError:
            pass

    # ------------------------------------------------------------------ steps

    def _ensure(self, cluster: str, token: str) -> str:
        # Read first: a secret made already (by the user's machine, for a controller VM whose
        # account may read and write it but not create secrets in the project) is never created again.
        name, data = self.secret_name(cluster), token.encode()
        held = self._latest_holds(name, data, hide=token)
        if held:
            return name
        if held is None:
            secret = resources.Secret(
                replication=resources.Replication(automatic=resources.Replication.Automatic()),
                labels={CLUSTER_LABEL: cluster},
            )
            try:
                self._call(
                    f"create secret {name}",
                    self._client.create_secret,
                    parent=f"projects/{self.project}",
                    secret_id=self.secret_id(cluster),
                    secret=secret,
                    hide=token,
                )
            except cloud_errors.AlreadyExistsError:
                pass
        self._call(
            f"add a version to secret {name}",
            self._client.add_secret_version,
            parent=name,
            payload=resources.SecretPayload(data=data, data_crc32c=crc32c(data)),
            hide=token,
        )
        return name

    def _latest_holds(self, name: str, data: bytes, *, hide: str) -> bool | None:
        """Whether `<name>/versions/latest` holds exactly `data`: False when it holds something
        else or is disabled or destroyed, None when there is no secret or no version yet."""
        try:
            response = self._call(
                f"read the latest version of secret {name}",
                self._client.access_secret_version,
                name=f"{name}/versions/latest",
                hide=hide,
            )
        except cloud_errors.NotFoundError:  # no secret, or no version yet
            return None
        except cloud_errors.InvalidRequestError as error:
            if isinstance(error.__cause__, google_exceptions.FailedPrecondition):  # latest is disabled or destroyed
                return False
            raise
        payload = response.payload
        if "data_crc32c" in payload and payload.data_crc32c != crc32c(payload.data):
            return False  # damaged in transit: write it again rather than trust it
        return hmac.compare_digest(payload.data, data)

    def _call(self, what: str, method: Callable[..., T], *, hide: str | None = None, **request: Any) -> T:
        """One API call with a timeout; transient errors retried with jittered backoff until the deadline.

        hide: a value `on_retry` must never see (an error echoing it is passed on redacted).
        """
        def report(call: str, error: BaseException, attempt: int) -> None:
            if self.on_retry is None:
                return
            if hide and isinstance(error, cloud_errors.CloudError) and _mentions(error, hide):
                error = _redacted(error, hide)
            self.on_retry(call, error, attempt)

        return call_google(what, method, request, service="Secret Manager", clock=self.clock,
                           call_timeout_s=self.call_timeout_s, retry_deadline_s=self.retry_deadline_s,
                           retry_initial_s=self.retry_initial_s, retry_max_s=self.retry_max_s,
                           map_error=lambda error: self._mapped(what, error), on_retry=report)
        raise AssertionError("unreachable")  # pragma: no cover

    def _mapped(self, what: str, error: google_exceptions.GoogleAPICallError) -> cloud_errors.CloudError:
        mapped = map_call_error(error, self.caller)
        if isinstance(mapped, (MissingPermissionError, ServiceDisabledError)):  # names what to do already
            mapped.message = f"{what}: {mapped.message}"
            mapped.args = (mapped.message,)
            return mapped
        if isinstance(mapped, cloud_errors.PermissionDeniedError):
            return cloud_errors.PermissionDeniedError(
                f"{what}: permission denied: {error.message}", hint=PERMISSION_HINT.format(project=self.project)
            )
        mapped.message = f"{what}: {mapped.message}"
        mapped.args = (mapped.message,)
        return mapped
