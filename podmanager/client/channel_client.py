"""The client's end of the channel: a verb asked of a cluster's controller over HTTPS.

The controller must present exactly the pinned certificate (its chain checked against that one
certificate, its name against the address, its SHA-256 against the pin) before the token is
sent; the token goes as a bearer header. Loads without Ray, JAX or the controller's modules
(tests/channel/test_server.py checks): this is what a laptop runs."""

from __future__ import annotations

from typing import Any, Self, TypeVar

import urllib3
from pydantic import BaseModel, ValidationError

from podmanager.channel import records
from podmanager.channel.errors import (
    ChannelCredentialError,
    ChannelError,
    ChannelUnanswered,
    RemoteError,
)
from podmanager.channel.verbs import ChannelVerbs, Verb
from podmanager.client import pinned

ReplyT = TypeVar("ReplyT", bound=BaseModel)
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 60.0  # `status` may probe hosts live when the monitor's view is stale


class ChannelClient(ChannelVerbs):
    """One cluster's controller, reached with this machine's credentials for it (`pinned.load`);
    its calls are the verbs of `ChannelVerbs`, each made by the table."""

    def __init__(self, credentials: pinned.ClientCredentials, *, explain_unreachable: bool = True):
        self.credentials = credentials
        self.explain_unreachable = explain_unreachable  # an unreachable controller's error reads its rule
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

    def ask(self, verb: Verb[Any, ReplyT], request: BaseModel | bytes) -> ReplyT:
        """One verb of the table asked: its request sent, its reply read (each verb is also this
        client's attribute: `client.status("c1")`, `client.submit(request)`)."""
        body = request if isinstance(request, bytes) else request.model_dump_json().encode()
        return self._send(verb.method, verb.path, body, verb.content_type, verb.reply)

    def caller(self) -> str:
        """This machine's address as the controller sees it (behind a NAT: its public one)."""
        return self._send("GET", records.CALLER_PATH, b"", "application/json", records.CallerReply).address

    def _send(self, method: str, path: str, body: bytes, content_type: str, reply: type[ReplyT]) -> ReplyT:
        where = f"{self.credentials.address.host}:{self.credentials.address.port}"
        try:
            response = self._pool.urlopen(
                method, path, body=body, redirect=False,
                headers={"Authorization": f"Bearer {self.credentials.token}", "Content-Type": content_type})
        except urllib3.exceptions.SSLError as error:
            raise ChannelCredentialError(
                f"the controller at {where} did not present the certificate pinned in "
                f"{self.credentials.folder / pinned.CERT_FILE}; the token was not sent ({_reason(error)})",
                hint=("If the controller was made again or moved, it has a new certificate: "
                      + pinned.refetch_hint(self.credentials.cluster))) from None
        except urllib3.exceptions.TimeoutError as error:  # connect or read: the packets went unanswered
            raise ChannelUnanswered(f"cannot reach the controller of {self.credentials.cluster} at {where}: "
                                    f"no answer ({_reason(error)})", hint=self._unreachable_hint()) from None
        except urllib3.exceptions.HTTPError as error:
            raise ChannelError(f"cannot reach the controller of {self.credentials.cluster} at {where}: "
                               f"{_reason(error)}", hint=self._unreachable_hint()) from None
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


    def _unreachable_hint(self) -> str:
        if not self.explain_unreachable:
            return "Check that the controller is up and that this machine may reach its address."
        # The cloud's client, loaded on this path only (the channel's client loads without it).
        from podmanager.client.channel_callers import unreachable_hint

        return unreachable_hint(self.credentials.cluster)


def _reason(error: Exception) -> str:
    """The innermost cause urllib3 wraps, as one line."""
    cause: BaseException = error
    while getattr(cause, "reason", None) is not None and isinstance(cause.reason, BaseException):
        cause = cause.reason
    return str(cause).splitlines()[0] if str(cause) else type(cause).__name__
