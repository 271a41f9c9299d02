"""Reading from a controller that may be rebooting: a read tried again while the channel cannot
reach the controller, for as long as a VM takes to come back; but not for as long when nothing
answers at all, which is also what a firewall rule that no longer admits this machine does
(its public address changed): then the user is told at once what to do, and the read given up
soon after (tenacity: every try bounded by the channel's timeouts, the tries by these waits)."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception_type, wait_fixed

from podmanager.channel.errors import ChannelError, ChannelUnanswered

T = TypeVar("T")
# A controller VM that crashed or rebooted answers again once its daemon is back (a minute or two
# on Google Cloud): a follower waits that long before it gives up on a read.
REBOOT_WAIT_S = 300.0
# Connections dropped unanswered this long in a row (each try takes the channel's connect
# timeout): the rule admits other addresses, or the VM is down; the user is told which command
# admits this machine, and a follower whose address changed does not wait out a reboot's time.
UNANSWERED_WAIT_S = 20.0
TRY_EVERY_S = 1.0


def patiently(read: Callable[[], T], on_wait: Callable[[str], None] | None = None,
              wait_s: float = REBOOT_WAIT_S, unanswered_s: float = UNANSWERED_WAIT_S) -> T:
    """`read` (a call that changes nothing), tried again while the controller cannot be reached,
    for up to `wait_s`, or `unanswered_s` of unanswered tries in a row; `on_wait` hears once
    why it waits (with the rule's hint when nothing answers). Refused credentials are not waited on."""
    unanswered_since: list[float | None] = [None]
    told: set[type] = set()

    def give_up(state: RetryCallState) -> bool:
        error = state.outcome.exception() if state.outcome else None
        now = time.monotonic()
        if isinstance(error, ChannelUnanswered):
            since = unanswered_since[0] = unanswered_since[0] or now
            if now - since >= unanswered_s:
                return True
        else:
            unanswered_since[0] = None  # a refusal: something answers; the reboot's wait holds
        return (state.seconds_since_start or 0.0) >= wait_s

    def tell(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        if on_wait is None or not isinstance(error, ChannelError) or type(error) in told:
            return
        told.add(type(error))
        if isinstance(error, ChannelUnanswered):
            on_wait(f"{error.message}. {error.hint or ''} Trying again for {unanswered_s:.0f}s.")
        else:
            on_wait(f"{error.message}; waiting for the controller (a reboot takes a minute or two)")

    retrying = Retrying(retry=retry_if_exception_type(ChannelError), stop=give_up, wait=wait_fixed(TRY_EVERY_S),
                        before_sleep=tell, reraise=True)
    return retrying(read)
