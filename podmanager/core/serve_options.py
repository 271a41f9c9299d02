"""How a service is served, as `serve` asks for it: a record both the controller's API and a
client of a controller VM read (a module of its own, so a client loads no router to name it)."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_QUEUE_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class ServeOptions:
    """How a service is served: replicas (None: one per slice of `Workload.slices`, else of the
    cluster), where users reach it, how long a request waits for a ready replica."""

    replicas: int | None = None
    host: str = "127.0.0.1"
    port: int = 0  # 0: a free port, chosen once (a restarted router keeps it)
    queue_timeout_s: float = DEFAULT_QUEUE_TIMEOUT_S
    follow_checkpoints: bool = False  # roll each newer complete checkpoint in, one replica at a time
