"""The channel's verbs, one table: each verb's path, HTTP method, request record and reply
record (`records.py`). The server's routes (`server.py`) and the client's calls
(`client/channel_client.py`) are both made from it, so a new verb is one line here and one
method of the controller's API named as the verb, taking its request record.

Not in the table, being no request and reply: the forward (`records.FORWARD_PATH`, a WebSocket
carrying a TCP connection) and the page (`page_server.PAGE_PREFIX`, GETs of HTML and JSON)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, overload

from pydantic import BaseModel

from podmanager.channel import records
from podmanager.channel.cluster_status import ClusterStatus

RequestT = TypeVar("RequestT", bound=BaseModel | bytes)
ReplyT = TypeVar("ReplyT", bound=BaseModel)
ZIP = "application/zip"
JSON = "application/json"


class Asker(Protocol):
    """What a verb is called on: a client that sends a request and reads its reply."""

    def ask(self, verb: Verb[Any, ReplyT], request: BaseModel | bytes) -> ReplyT: ...


@dataclass(frozen=True)
class Verb(Generic[RequestT, ReplyT]):
    """One verb. Read from a client (`ChannelVerbs`' subclass), it is that client's call:
    `client.status(request)`, or the request's fields (`client.status("c1")`)."""

    path: str
    request: type[RequestT]
    reply: type[ReplyT]
    method: str = "POST"
    name: str = field(default="", compare=False)  # the attribute it is declared as: the API's method too

    @property
    def content_type(self) -> str:
        return ZIP if self.request is bytes else JSON

    def __set_name__(self, owner: type, name: str) -> None:
        object.__setattr__(self, "name", name)

    @overload
    def __get__(self, client: None, owner: type) -> Verb[RequestT, ReplyT]: ...

    @overload
    def __get__(self, client: Asker, owner: type) -> Call[RequestT, ReplyT]: ...

    def __get__(self, client: Asker | None, owner: type) -> Verb[RequestT, ReplyT] | Call[RequestT, ReplyT]:
        return self if client is None else Call(self, client)

    def request_of(self, *args: Any, **fields: Any) -> RequestT:
        """The request a call gives: the record itself, or its fields (positional in the
        record's order)."""
        if len(args) == 1 and not fields and isinstance(args[0], self.request):
            return args[0]
        if self.request is bytes:
            raise TypeError(f"{self.name} sends bytes, not {args!r}")
        named = dict(zip(self.request.model_fields, args))  # type: ignore[union-attr]
        return self.request(**named, **fields)


@dataclass(frozen=True)
class Call(Generic[RequestT, ReplyT]):
    verb: Verb[RequestT, ReplyT]
    client: Asker

    def __call__(self, *args: Any, **fields: Any) -> ReplyT:
        return self.client.ask(self.verb, self.verb.request_of(*args, **fields))


def _v(path: str) -> str:
    return f"{records.API_PREFIX}/{path}"


class ChannelVerbs:
    """The table. The controller's API answers each with its method of the same name."""

    status = Verb(_v("status"), records.StatusRequest, ClusterStatus)
    events = Verb(_v("events"), records.EventsRequest, records.EventsReply)
    spec = Verb(_v("spec"), records.StatusRequest, records.SpecReply)
    # up and down: jobs on the controller, followed by `job` and the cluster's events
    start_up = Verb(_v("up"), records.UpRequest, records.JobReply)
    start_down = Verb(_v("down"), records.DownRequest, records.JobReply)
    job = Verb(_v("job"), records.JobRequest, records.JobReply)
    # runs
    keep_code = Verb(_v("code"), bytes, records.CodeReply)  # the body is the working dir's zip, not JSON
    submit = Verb(_v("submit"), records.SubmitRequest, records.RunReply)
    watch = Verb(_v("watch"), records.WatchRequest, records.WatchReply)
    cancel = Verb(_v("cancel"), records.RunRequest, records.RunReply)
    run = Verb(_v("run"), records.RunRequest, records.RunReply)
    runs = Verb(_v("runs"), records.StatusRequest, records.RunsReply)
    # services
    serve = Verb(_v("serve"), records.ServeRequest, records.ServiceReply)
    service = Verb(_v("service"), records.ServiceRequest, records.ServiceReply)
    cancel_service = Verb(_v("service/cancel"), records.ServiceRequest, records.ServiceReply)
    services = Verb(_v("services"), records.StatusRequest, records.ServicesReply)
    # a dry run's fault, injected by the controller into its cluster
    fault = Verb(_v("fault"), records.FaultRequest, records.FaultReply)


VERBS: tuple[Verb[Any, Any], ...] = tuple(v for v in vars(ChannelVerbs).values() if isinstance(v, Verb))
