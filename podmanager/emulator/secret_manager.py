"""Secret Manager in memory, served over gRPC beside the Cloud TPU emulator and over REST for
a VM's startup script: what `up` writes the Ray token to and what a booting VM reads it from.

gRPC (`google.cloud.secretmanager.v1.SecretManagerService`, on the `TpuEmulator`'s port, so
`TPU_EMULATOR_HOST` names both): CreateSecret, GetSecret, DeleteSecret, AddSecretVersion,
AccessSecretVersion, DisableSecretVersion, GetIamPolicy and SetIamPolicy, with Google's
status codes: ALREADY_EXISTS for a second create, NOT_FOUND for a missing secret or version,
INVALID_ARGUMENT for a malformed name or a payload whose `data_crc32c` does not match,
FAILED_PRECONDITION for reading a disabled version, ABORTED for a policy whose etag is stale.
`versions/latest` is the newest version whatever its state, as in the service.

REST (`serve_rest`): `GET /v1/projects/P/secrets/S/versions/V:access` with any
`Authorization: Bearer ...` (401 without), answering `{"name", "payload": {"data", "dataCrc32c"}}`
as the service's JSON does (data in base64, the int64 checksum as a string): the one route the
startup script uses when its image has no gcloud (`PODMANAGER_SECRETS_API=http://HOST:PORT/v1`).

Any project is accepted; secrets are keyed by their full resource name. Given
`project_numbers` (id -> number), the names it returns carry a project's number, as Google's
do (projects/123456789012/secrets/S), and a request may name the project either way.
`fail_next(method, code, message)` makes calls fail before they reach the store, as an outage
of the service would.
"""

from __future__ import annotations

import base64
import itertools
import os
import re
import threading
from collections import deque
from concurrent import futures
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Mapping
from urllib.parse import unquote, urlsplit

import grpc
from google.cloud.secretmanager_v1.types import resources, service
from google.iam.v1 import iam_policy_pb2, policy_pb2
from google.protobuf import empty_pb2, timestamp_pb2
from pydantic import BaseModel, ConfigDict

from podmanager.cloud.checksum import crc32c
from podmanager.core.peer import OwnerOnlyInterceptor, listening_address
from podmanager.emulator import rest
from podmanager.emulator.grpc_validation import SchemaInterceptor
from podmanager.emulator.iam import tokens
from podmanager.emulator.sim.refusal import Refused

SECRET_MANAGER_SERVICE = "google.cloud.secretmanager.v1.SecretManagerService"
MAX_PAYLOAD_BYTES = 64 * 1024  # the service's limit on one version's data

_SECRET = re.compile(r"^projects/(?P<project>[^/]+)/secrets/(?P<id>[A-Za-z0-9_-]{1,255})$")
_VERSION = re.compile(r"^(?P<secret>projects/[^/]+/secrets/[^/]+)/versions/(?P<version>latest|[1-9]\d*)$")
_REST_ACCESS = re.compile(r"^/v1/(?P<name>projects/[^/]+/secrets/[^/]+/versions/[^/:]+):access$")

# gRPC code -> the HTTP status Google's REST front end answers with.
_HTTP_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.UNAVAILABLE: 503,
}


@dataclass(frozen=True)
class StoredVersion:
    """One version of a secret as the emulator holds it (for tests and the control side)."""

    name: str
    number: int
    enabled: bool
    data: bytes


@dataclass
class _Version:
    message: resources.SecretVersion
    data: bytes


@dataclass
class _Secret:
    message: resources.Secret
    versions: list[_Version] = field(default_factory=list)
    policy: policy_pb2.Policy = field(default_factory=policy_pb2.Policy)


def _now() -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.GetCurrentTime()
    return stamp


_AS_BASE64 = ConfigDict(ser_json_bytes="base64", val_json_bytes="base64")


class _SavedVersion(BaseModel):
    model_config = _AS_BASE64

    message: bytes  # resources.SecretVersion, serialized
    data: bytes


class _SavedSecret(BaseModel):
    model_config = _AS_BASE64

    message: bytes  # resources.Secret, serialized
    versions: list[_SavedVersion]
    policy: bytes  # policy_pb2.Policy, serialized


class _Saved(BaseModel):
    """What a persistent emulator keeps of its secrets across a restart (as Secret Manager
    keeps them whatever happens to a client): owner-only, beside the project's state."""

    model_config = _AS_BASE64

    secrets: dict[str, _SavedSecret]


MUTATIONS = frozenset({"CreateSecret", "DeleteSecret", "AddSecretVersion", "DisableSecretVersion", "SetIamPolicy"})


class SecretManagerEmulator:
    """An in-memory Secret Manager: the calls podmanager and a VM make, thread-safe. With
    `saved_at`, its secrets survive the emulator's restart (the background emulator's)."""

    def __init__(self, project_numbers: Mapping[str, str] | None = None, *, saved_at: Path | None = None) -> None:
        self._numbers = dict(project_numbers or {})  # project id -> the number its names carry
        self._secrets: dict[str, _Secret] = {}
        self._failures: dict[str, list[tuple[grpc.StatusCode, str]]] = {}
        self._etags = itertools.count(1)  # a policy's etag is new on every write
        # (method, request), in arrival order; the newest 10,000, as the TPU emulator keeps its own.
        self.requests: deque[tuple[str, Any]] = deque(maxlen=10_000)
        self._lock = threading.RLock()
        # Asked on each read by a VM: True refuses it (the TPU emulator's `secret-denied` fault).
        self.refuses_vm_read: Callable[[], bool] = lambda: False
        self.saved_at = saved_at
        self.gated = False  # True: the project's IAM checks every call before it comes here
        if saved_at is not None and saved_at.is_file():
            self._restore(_Saved.model_validate_json(saved_at.read_text()))

    def _restore(self, saved: _Saved) -> None:
        for name, secret in saved.secrets.items():
            self._secrets[name] = _Secret(
                resources.Secret.deserialize(secret.message),
                [_Version(resources.SecretVersion.deserialize(v.message), v.data) for v in secret.versions],
                policy_pb2.Policy.FromString(secret.policy))

    def _save(self) -> None:
        """Every secret, written whole after a change (they are few and change rarely), 0600."""
        if self.saved_at is None:
            return
        saved = _Saved(secrets={name: _SavedSecret(
            message=resources.Secret.serialize(secret.message),
            versions=[_SavedVersion(message=resources.SecretVersion.serialize(v.message), data=v.data)
                      for v in secret.versions],
            policy=secret.policy.SerializeToString()) for name, secret in self._secrets.items()})
        self.saved_at.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.saved_at.with_name(f".{self.saved_at.name}.tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(saved.model_dump_json())
        os.replace(temporary, self.saved_at)

    # ------------------------------------------------------------------ serving

    def handlers(self) -> tuple[grpc.GenericRpcHandler, ...]:
        """The gRPC service, to add to a server (the TPU emulator's: one port for both APIs)."""
        methods: dict[str, tuple[Callable[[Any], Any], Callable[[bytes], Any], Callable[[Any], bytes]]] = {
            "CreateSecret": (self.create_secret, service.CreateSecretRequest.deserialize, resources.Secret.serialize),
            "GetSecret": (self.get_secret, service.GetSecretRequest.deserialize, resources.Secret.serialize),
            "DeleteSecret": (self.delete_secret, service.DeleteSecretRequest.deserialize,
                             empty_pb2.Empty.SerializeToString),
            "AddSecretVersion": (self.add_secret_version, service.AddSecretVersionRequest.deserialize,
                                 resources.SecretVersion.serialize),
            "AccessSecretVersion": (self.access_secret_version, service.AccessSecretVersionRequest.deserialize,
                                    service.AccessSecretVersionResponse.serialize),
            "DisableSecretVersion": (self.disable_secret_version, service.DisableSecretVersionRequest.deserialize,
                                     resources.SecretVersion.serialize),
            "GetIamPolicy": (self.get_iam_policy, iam_policy_pb2.GetIamPolicyRequest.FromString,
                             policy_pb2.Policy.SerializeToString),
            "SetIamPolicy": (self.set_iam_policy, iam_policy_pb2.SetIamPolicyRequest.FromString,
                             policy_pb2.Policy.SerializeToString),
        }
        handlers = {
            name: grpc.unary_unary_rpc_method_handler(
                self._wrap(name, fn), request_deserializer=deserialize, response_serializer=serialize)
            for name, (fn, deserialize, serialize) in methods.items()
        }
        return (grpc.method_handlers_generic_handler(SECRET_MANAGER_SERVICE, handlers),)

    def serve(self, host: str = "127.0.0.1", port: int = 0) -> tuple[grpc.Server, int]:
        """Secret Manager alone on host:port (0: any free port); the TPU emulator serves it with itself."""
        interceptor = OwnerOnlyInterceptor()  # only the owner's processes, as the emulator's
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="secret-manager-emulator"),
                             interceptors=[interceptor, SchemaInterceptor()])  # Google's definitions checked
        server.add_generic_rpc_handlers(self.handlers())
        bound = server.add_insecure_port(f"{host}:{port}")
        interceptor.server = listening_address(host, bound)
        server.start()
        return server, bound

    def _wrap(self, method: str, fn: Callable[[Any], Any]) -> Callable[[Any, grpc.ServicerContext], Any]:
        def handler(request: Any, context: grpc.ServicerContext) -> Any:
            try:
                return self.call(method, fn, request)
            except Refused as refused:
                context.abort(refused.code, refused.message)

        return handler

    def call(self, method: str, fn: Callable[[Any], Any], request: Any) -> Any:
        """One call as the service takes it: logged, failed if a failure is due, else answered."""
        with self._lock:
            self.requests.append((method, request))
            due = self._failures.get(method)
            if due:
                raise Refused(*due.pop(0))
            answer = fn(request)  # a copy of what is stored: the server serializes it after the lock
            if method in MUTATIONS:
                self._save()
            return answer

    def serve_rest(self, host: str = "127.0.0.1", port: int = 0) -> tuple[ThreadingHTTPServer, int]:
        """The REST route a VM's startup script reads the token by, alone, served from a background
        thread (the emulator serves it with its other routes); returns (server, port). Stop it with
        `server.shutdown()` and `server.server_close()`."""
        return rest.serve([self.rest_access], host, port, name="secret-manager-rest")

    def rest_access(self, path: str, headers: Mapping[str, str]) -> rest.Answer | None:
        """`GET /v1/projects/P/secrets/S/versions/V:access` answered as the service's JSON does
        (a `rest.Route`); None for any other path."""
        match = _REST_ACCESS.match(unquote(urlsplit(path).path))
        if match is None:
            return None
        refused = rest.unauthenticated(headers)
        if refused is not None:
            return refused
        account = _vm_account(headers)
        member = f"serviceAccount:{account}"
        # Gated (the emulator's IAM, `iam/gate.py`), the policy was checked before: only the fault here.
        if account is not None and (self.refuses_vm_read() or (not self.gated and not self.may_access(match["name"], member))):
            return rest.error_answer(403, "PERMISSION_DENIED", f"Permission 'secretmanager.versions.access' denied "
                                     f"for resource '{match['name']}' (or it may not exist).")
        request = service.AccessSecretVersionRequest(name=match["name"])
        try:
            response = self.call("AccessSecretVersion", self.access_secret_version, request)
        except Refused as failed:
            return rest.error_answer(_HTTP_STATUS.get(failed.code, 500), failed.code.name, failed.message)
        return rest.json_answer(200, {
            "name": response.name,
            "payload": {
                "data": base64.b64encode(response.payload.data).decode(),
                "dataCrc32c": str(response.payload.data_crc32c),  # int64 in JSON is a string
            },
        })

    # ------------------------------------------------------------------ faults and reads (control side)

    def fail_next(self, method: str, code: grpc.StatusCode, message: str, times: int = 1) -> None:
        """The next `times` calls of `method` (e.g. "CreateSecret") fail with `code` before reaching the store."""
        with self._lock:
            self._failures.setdefault(method, []).extend([(code, message)] * times)

    def requests_of(self, method: str) -> list[Any]:
        with self._lock:
            return [request for name, request in self.requests if name == method]

    def secret_names(self) -> list[str]:
        with self._lock:
            return sorted(self._secrets)

    def secret(self, name: str) -> resources.Secret:
        """A copy of the secret as stored; KeyError if there is none."""
        with self._lock:
            return resources.Secret(self._secrets[self._canonical(name)].message)

    def versions(self, name: str) -> list[StoredVersion]:
        """Every version of the secret, oldest first; KeyError if there is no such secret."""
        with self._lock:
            return [
                StoredVersion(name=v.message.name, number=number, data=v.data,
                              enabled=v.message.state == resources.SecretVersion.State.ENABLED)
                for number, v in enumerate(self._secrets[self._canonical(name)].versions, start=1)
            ]

    # ------------------------------------------------------------------ the API (under the lock)

    def _canonical(self, name: str) -> str:
        """`name` with its project as the names this service returns carry it (its number, if known)."""
        project, slash, rest = name.removeprefix("projects/").partition("/")
        if not name.startswith("projects/") or project not in self._numbers:
            return name
        return f"projects/{self._numbers[project]}{slash}{rest}"

    def _secret(self, name: str) -> _Secret:
        name = self._canonical(name)
        if not _SECRET.match(name):
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, f"malformed secret name {name!r}")
        found = self._secrets.get(name)
        if found is None:
            raise Refused(grpc.StatusCode.NOT_FOUND, f"Secret [{name}] not found or has no versions.")
        return found

    def _version(self, name: str) -> _Version:
        name = self._canonical(name)
        match = _VERSION.match(name)
        if not match:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, f"malformed secret version name {name!r}")
        secret = self._secret(match["secret"])
        if not secret.versions:
            raise Refused(grpc.StatusCode.NOT_FOUND,
                                     f"Secret [{match['secret']}] not found or has no versions.")
        number = len(secret.versions) if match["version"] == "latest" else int(match["version"])
        if number > len(secret.versions):
            raise Refused(grpc.StatusCode.NOT_FOUND, f"Secret Version [{name}] not found.")
        return secret.versions[number - 1]

    def create_secret(self, request: service.CreateSecretRequest) -> resources.Secret:
        name = self._canonical(f"{request.parent}/secrets/{request.secret_id}")
        if not _SECRET.match(name):
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, f"malformed parent or secret_id: {name!r}")
        if "replication" not in request.secret:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "Secret.replication is required.")
        if name in self._secrets:
            raise Refused(grpc.StatusCode.ALREADY_EXISTS, f"Secret [{name}] already exists.")
        secret = resources.Secret(request.secret)
        secret.name = name
        secret.create_time = _now()
        self._secrets[name] = _Secret(secret, policy=policy_pb2.Policy(etag=self._etag()))
        return resources.Secret(secret)

    def get_secret(self, request: service.GetSecretRequest) -> resources.Secret:
        return resources.Secret(self._secret(request.name).message)

    def delete_secret(self, request: service.DeleteSecretRequest) -> empty_pb2.Empty:
        self._secret(request.name)
        del self._secrets[self._canonical(request.name)]  # its versions and its IAM policy go with it
        return empty_pb2.Empty()

    def add_secret_version(self, request: service.AddSecretVersionRequest) -> resources.SecretVersion:
        secret = self._secret(request.parent)
        payload = request.payload
        if len(payload.data) > MAX_PAYLOAD_BYTES:
            raise Refused(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"payload.data is {len(payload.data)} bytes; at most {MAX_PAYLOAD_BYTES} are allowed")
        checked = "data_crc32c" in payload
        if checked and payload.data_crc32c != crc32c(payload.data):
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "Checksum mismatch for payload.data.")
        version = resources.SecretVersion(
            name=f"{secret.message.name}/versions/{len(secret.versions) + 1}", create_time=_now(),
            state=resources.SecretVersion.State.ENABLED, client_specified_payload_checksum=checked)
        secret.versions.append(_Version(version, bytes(payload.data)))
        return resources.SecretVersion(version)

    def access_secret_version(self, request: service.AccessSecretVersionRequest) -> service.AccessSecretVersionResponse:
        version = self._version(request.name)
        stored = version.message
        if stored.state != resources.SecretVersion.State.ENABLED:
            raise Refused(grpc.StatusCode.FAILED_PRECONDITION,
                                     f"Secret Version [{stored.name}] is in {stored.state.name} state.")
        payload = resources.SecretPayload(data=version.data, data_crc32c=crc32c(version.data))
        return service.AccessSecretVersionResponse(name=stored.name, payload=payload)

    def disable_secret_version(self, request: service.DisableSecretVersionRequest) -> resources.SecretVersion:
        version = self._version(request.name)
        version.message.state = resources.SecretVersion.State.DISABLED
        return resources.SecretVersion(version.message)

    def may_access(self, version_name: str, member: str) -> bool:
        """Whether `member` may read the secret's versions by its IAM policy (a VM's service
        account reads the Ray token only if `up` granted it, as on Google Cloud)."""
        secret_name = version_name.split("/versions/")[0]
        with self._lock:
            try:
                policy = self._secret(secret_name).policy
            except Refused:
                return True  # not found: the access call itself says so
            return any(b.role in ACCESSOR_ROLES and member in b.members for b in policy.bindings)

    def bindings_of(self, resource: str) -> list[tuple[str, list[str]]]:
        """The IAM bindings of the secret `resource` names (itself or a version of it); [] for
        anything else (the gate's resource policy: a secret's grants count for its calls)."""
        secret_name = self._canonical(resource.split("/versions/")[0])
        with self._lock:
            found = self._secrets.get(secret_name)
            return [(b.role, list(b.members)) for b in found.policy.bindings] if found else []

    def get_iam_policy(self, request: iam_policy_pb2.GetIamPolicyRequest) -> policy_pb2.Policy:
        policy = policy_pb2.Policy()
        policy.CopyFrom(self._secret(request.resource).policy)
        return policy

    def set_iam_policy(self, request: iam_policy_pb2.SetIamPolicyRequest) -> policy_pb2.Policy:
        secret = self._secret(request.resource)
        if request.policy.etag and request.policy.etag != secret.policy.etag:
            # Read-modify-write with a stale etag: someone changed the policy in between.
            raise Refused(grpc.StatusCode.ABORTED,
                                     "There were concurrent policy changes. Please retry the whole read-modify-write "
                                     "with exponential backoff.")
        secret.policy = policy_pb2.Policy()
        secret.policy.CopyFrom(request.policy)
        secret.policy.etag = self._etag()
        stored = policy_pb2.Policy()
        stored.CopyFrom(secret.policy)
        return stored

    def _etag(self) -> bytes:
        return f"emu-{next(self._etags)}".encode()


ACCESSOR_ROLES = frozenset({"roles/secretmanager.secretAccessor", "roles/secretmanager.admin", "roles/owner"})


def _vm_account(headers: Mapping[str, str]) -> str | None:
    """The service account a bearer token stands for (`iam/tokens.py`); None for anyone else's."""
    principal = tokens.principal_of(headers.get("authorization", "").removeprefix("Bearer ")) or ""
    return principal.removeprefix("serviceAccount:") if principal.startswith("serviceAccount:") else None
