"""What `run` does after it submits, on either side of the channel (`Cluster.run`,
`RemoteCluster.run`): follow the run to its end; an exception while following takes the run
with it, unless an interrupt was handed to `on_interrupt`, which chose to leave it going; with
`down_on_exit` the cluster goes once the run has ended (however it ended), unless left going."""

from __future__ import annotations

from typing import Callable, Protocol, TypeVar


class _Record(Protocol):
    @property
    def active(self) -> bool: ...


class _Run(Protocol):
    def status(self) -> _Record: ...

    def cancel(self) -> object: ...


H = TypeVar("H", bound=_Run)
R = TypeVar("R")


def run_to_end(submit: Callable[[], H], follow: Callable[[H], R], *, interrupt_handled: bool,
               down: Callable[[], None] | None = None) -> R:
    """`follow(submit())`. `interrupt_handled`: the follower was given an `on_interrupt`, so a
    KeyboardInterrupt that still comes out means the user detached if the run is still active.
    `down`: called at the end (`down_on_exit`), unless the run was left going on purpose."""
    detached = False
    try:
        handle = submit()
        try:
            return follow(handle)
        except KeyboardInterrupt:
            if interrupt_handled:
                detached = handle.status().active  # `on_interrupt` chose to leave it going
            else:
                handle.cancel()
            raise
        except BaseException:
            handle.cancel()
            raise
    finally:
        if down is not None and not detached:
            down()
