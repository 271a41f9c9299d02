"""Reading from a controller that may be rebooting: a read tried again while the channel cannot
reach the controller, for as long as a VM takes to come back."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

from podmanager.channel.errors import ChannelError

T = TypeVar("T")
# A controller VM that crashed or rebooted answers again once its daemon is back (a minute or two
# on Google Cloud): a follower waits that long before it gives up on a read.
REBOOT_WAIT_S = 300.0


def patiently(read: Callable[[], T], on_wait: Callable[[str], None] | None = None,
              wait_s: float = REBOOT_WAIT_S) -> T:
    """`read` (a call that changes nothing), tried again while the controller cannot be reached,
    for up to `wait_s`; `on_wait` hears once why it waits. Refused credentials are not waited on."""
    deadline = time.monotonic() + wait_s
    told = False
    while True:
        try:
            return read()
        except ChannelError as unreachable:
            if time.monotonic() >= deadline:
                raise
            if not told and on_wait is not None:
                on_wait(f"{unreachable.message}; waiting for the controller (a reboot takes a minute or two)")
                told = True
            time.sleep(1.0)
