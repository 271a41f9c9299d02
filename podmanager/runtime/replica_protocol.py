"""What a service's router and a replica's first host say to each other.

One WebSocket per replica: the replica's host 0 connects to the router (so a replica needs no
port of its own, and the router sees a replica's loss the moment its connection drops), and
the two exchange these messages as JSON text frames, each with a `type`:

- `hello` (replica -> router): the replica is ready (its checkpoint loaded, one batch run),
  serving checkpoint `step`. Said again on the same connection after a reload.
- `request` (router -> replica): one request's inputs, under an id the router chose.
- `working` (replica -> router): the ids of the batch it is about to run `predict` on. If the
  replica is lost before answering them, the router answers them 502 instead of sending them
  to another replica: a request that ended one replica must not end a second.
- `result` (replica -> router): that request's outputs.
- `failed` (replica -> router): `predict` raised on that request alone (`cause` "inputs",
  answered 422), or the replica is broken (`cause` "replica", answered 500); `error` says why.
- `draining` (replica -> router): a preemption notice came; send nothing more, the requests
  already sent are still answered. The router answers with `draining` too, after which it
  sends nothing: once the replica has it, every request sent to it has arrived, and when
  those are answered the replica closes the connection.
- `reload` (replica -> router): a newer checkpoint (`step`) is complete; may the replica load
  it? The router grants it by saying `reload` back, when every other replica is ready and none
  is reloading (so at most one of N is out), after every request already sent; it sends
  nothing more until the replica's next `hello`.

The replica authenticates with `Authorization: Bearer <token>` on the upgrade request.
Plain dataclasses and the standard library: the program side imports this without JAX or
podmanager's other layers.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Union

# Environment podmanager sets for every process of a service's replica.
ENV_SERVE_URL = "PODMANAGER_SERVE_URL"  # ws://HOST:PORT/replica, the router's side for replicas
ENV_SERVE_TOKEN = "PODMANAGER_SERVE_TOKEN"  # the bearer token the router expects
ENV_SERVICE_ID = "PODMANAGER_SERVICE_ID"
ENV_REPLICA = "PODMANAGER_REPLICA"  # the replica's index (its slice)
ENV_FOLLOW_CHECKPOINTS = "PODMANAGER_FOLLOW_CHECKPOINTS"  # "1": roll newer checkpoints in (serve --follow-checkpoints)

REPLICA_PATH = "/replica"
# The largest body a user may POST (a 413 beyond), and so the largest frame either side takes:
# aiohttp's defaults (1 MiB bodies, 4 MiB frames) would refuse an image or a long prompt.
MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_FRAME_BYTES = 2 * MAX_BODY_BYTES  # a body's inputs, or its outputs, as JSON within a frame


INPUTS = "inputs"
REPLICA = "replica"
CAUSES = (INPUTS, REPLICA)


@dataclass(frozen=True)
class Hello:
    replica: int
    run_id: str
    attempt: int
    max_batch: int  # the router keeps at most twice this many requests at the replica
    step: int | None = None  # the checkpoint step it serves, if it says
    type: str = "hello"


@dataclass(frozen=True)
class Request:
    id: int
    inputs: Any
    type: str = "request"


@dataclass(frozen=True)
class Result:
    id: int
    outputs: Any
    type: str = "result"


@dataclass(frozen=True)
class Working:
    ids: list[int]
    type: str = "working"


@dataclass(frozen=True)
class Failed:
    id: int
    error: str  # what went wrong, for the user: the exception's type and message
    cause: str = INPUTS  # INPUTS: this request's inputs; REPLICA: the replica itself
    type: str = "failed"


@dataclass(frozen=True)
class Draining:
    type: str = "draining"


@dataclass(frozen=True)
class Reload:
    step: int
    type: str = "reload"


Message = Union[Hello, Request, Result, Working, Failed, Draining, Reload]
_TYPES: dict[str, type] = {"hello": Hello, "request": Request, "result": Result, "working": Working,
                           "failed": Failed, "draining": Draining, "reload": Reload}


def encode(message: Message) -> str:
    """The message as strict JSON: NaN or Infinity anywhere (which JSON cannot hold) is a
    ValueError, as is a value JSON has no form for (TypeError)."""
    return json.dumps(asdict(message), allow_nan=False)


def decode(text: str | bytes) -> Message:
    """The message a frame holds; ValueError for anything else (unknown type, missing or
    extra fields)."""
    data = json.loads(text)
    if not isinstance(data, dict) or data.get("type") not in _TYPES:
        raise ValueError(f"not a replica message: {str(text)[:80]!r}")
    try:
        return _TYPES[data["type"]](**data)
    except TypeError as error:
        raise ValueError(f"malformed {data['type']} message: {error}") from None
