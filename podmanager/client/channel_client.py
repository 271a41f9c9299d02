"""The client's end of the channel: a verb asked of a cluster's controller over HTTPS.

The controller must present exactly the pinned certificate (its chain checked against that one
certificate, its name against the address, its SHA-256 against the pin) before the token is
sent; the token goes as a bearer header. Loads without Ray, JAX or the controller's modules
(tests/channel/test_channel.py checks): this is what a laptop runs."""

from __future__ import annotations

from typing import Self, TypeVar

import urllib3
from pydantic import BaseModel, ValidationError

from podmanager.channel import records
from podmanager.channel.cluster_status import ClusterStatus
from podmanager.channel.errors import ChannelCredentialError, ChannelError, RemoteError
from podmanager.client import pinned

ReplyT = TypeVar("ReplyT", bound=BaseModel)
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 60.0  # `status` may probe hosts live when the monitor's view is stale


class ChannelClient:
    """One cluster's controller, reached with this machine's credentials for it (`pinned.load`)."""

    def __init__(self, credentials: pinned.ClientCredentials):
        self.credentials = credentials
        context = credentials.tls_context()
        address = credentials.address
        self._pool = urllib3.HTTPSConnectionPool(
            address.host, address.port, ssl_context=context, assert_fingerprint=credentials.fingerprint,
            timeout=urllib3.Timeout(connect=CONNECT_TIMEOUT_S, read=READ_TIMEOUT_S), retries=False, maxsize=2)

    @classmethod
    def for_cluster(cls, cluster: str) -> Self:
        return cls(pinned.load(cluster))

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def status(self, cluster: str) -> ClusterStatus:
        return self._ask(records.STATUS_PATH, records.StatusRequest(cluster=cluster), ClusterStatus)

    def events(self, cluster: str, *, after_id: int = 0) -> records.EventsReply:
        return self._ask(records.EVENTS_PATH, records.EventsRequest(cluster=cluster, after_id=after_id),
                         records.EventsReply)

    def start_up(self, request: records.UpRequest) -> records.JobReply:
        return self._ask(records.UP_PATH, request, records.JobReply)

    def start_down(self, request: records.DownRequest) -> records.JobReply:
        return self._ask(records.DOWN_PATH, request, records.JobReply)

    def job(self, job_id: str) -> records.JobReply:
        return self._ask(records.JOB_PATH, records.JobRequest(job_id=job_id), records.JobReply)

    def send_code(self, zipped: bytes) -> records.CodeReply:
        """A working dir's zip, kept on the controller by its content (sent again: kept once)."""
        return self._post(records.CODE_PATH, zipped, "application/zip", records.CodeReply)

    def submit(self, request: records.SubmitRequest) -> records.RunReply:
        return self._ask(records.SUBMIT_PATH, request, records.RunReply)

    def watch(self, request: records.WatchRequest) -> records.WatchReply:
        return self._ask(records.WATCH_PATH, request, records.WatchReply)

    def cancel(self, cluster: str, run_id: str) -> records.RunReply:
        return self._ask(records.CANCEL_PATH, records.RunRequest(cluster=cluster, run_id=run_id), records.RunReply)

    def run(self, cluster: str, run_id: str) -> records.RunReply:
        return self._ask(records.RUN_PATH, records.RunRequest(cluster=cluster, run_id=run_id), records.RunReply)

    def spec(self, cluster: str) -> records.SpecReply:
        return self._ask(records.SPEC_PATH, records.StatusRequest(cluster=cluster), records.SpecReply)

    def runs(self, cluster: str) -> records.RunsReply:
        return self._ask(records.RUNS_PATH, records.StatusRequest(cluster=cluster), records.RunsReply)

    def serve(self, request: records.ServeRequest) -> records.ServiceReply:
        return self._ask(records.SERVE_PATH, request, records.ServiceReply)

    def service(self, cluster: str, service_id: str) -> records.ServiceReply:
        return self._ask(records.SERVICE_PATH, records.ServiceRequest(cluster=cluster, service_id=service_id),
                         records.ServiceReply)

    def cancel_service(self, cluster: str, service_id: str) -> records.ServiceReply:
        return self._ask(records.SERVICE_CANCEL_PATH, records.ServiceRequest(cluster=cluster, service_id=service_id),
                         records.ServiceReply)

    def services(self, cluster: str) -> records.ServicesReply:
        return self._ask(records.SERVICES_PATH, records.StatusRequest(cluster=cluster), records.ServicesReply)

    def fault(self, request: records.FaultRequest) -> records.FaultReply:
        return self._ask(records.FAULT_PATH, request, records.FaultReply)

    def _ask(self, path: str, request: BaseModel, reply: type[ReplyT]) -> ReplyT:
        return self._post(path, request.model_dump_json().encode(), "application/json", reply)

    def _post(self, path: str, body: bytes, content_type: str, reply: type[ReplyT]) -> ReplyT:
        where = f"{self.credentials.address.host}:{self.credentials.address.port}"
        try:
            response = self._pool.urlopen(
                "POST", path, body=body, redirect=False,
                headers={"Authorization": f"Bearer {self.credentials.token}", "Content-Type": content_type})
        except urllib3.exceptions.SSLError as error:
            raise ChannelCredentialError(
                f"the controller at {where} did not present the certificate pinned in "
                f"{self.credentials.folder / pinned.CERT_FILE}; the token was not sent ({_reason(error)})",
                hint=("If the controller was made again or moved, it has a new certificate: "
                      + pinned.refetch_hint(self.credentials.cluster))) from None
        except urllib3.exceptions.HTTPError as error:
            raise ChannelError(f"cannot reach the controller of {self.credentials.cluster} at {where}: "
                               f"{_reason(error)}",
                               hint="Check that the controller is up and that this machine may reach its address.") from None
        if response.status == 401:
            raise ChannelCredentialError(
                f"the controller at {where} refused the token in {self.credentials.folder / pinned.TOKEN_FILE}: "
                "it is not this cluster's", hint=pinned.refetch_hint(self.credentials.cluster))
        if response.status != 200:
            try:
                error = records.ErrorReply.model_validate_json(response.data)
            except ValidationError:
                raise ChannelError(f"the controller at {where} answered {path} with HTTP {response.status} "
                                   "and no reply podmanager reads") from None
            raise RemoteError(error.message, hint=error.hint, exit_code=error.exit_code)
        try:
            return reply.model_validate_json(response.data)
        except ValidationError as error:
            raise ChannelError(f"the controller at {where} answered {path} with a reply this client cannot read "
                               f"({error.errors()[0]['msg']}); is it another podmanager version?") from None


def _reason(error: Exception) -> str:
    """The innermost cause urllib3 wraps, as one line."""
    cause: BaseException = error
    while getattr(cause, "reason", None) is not None and isinstance(cause.reason, BaseException):
        cause = cause.reason
    return str(cause).splitlines()[0] if str(cause) else type(cause).__name__
