"""A follower's reads from a controller it cannot reach (`client/patience.py`): a refused
connection (the VM is up, its daemon not yet) is waited on for a reboot's time; connections
that go unanswered (a firewall rule that no longer admits this machine's address) are given up
soon, having told the user the rule's hint, the command that admits this machine."""

from __future__ import annotations

import time

import pytest

from podmanager.channel.errors import ChannelError, ChannelUnanswered
from podmanager.client import patience

CONNECT_TIMEOUT_S = 10.0  # what one unanswered try costs (the channel client's connect timeout)
HINT = "Its firewall rule pm-lap-channel admits 198.18.0.1/32. 'podmanager access add -c lap --dry-run' admits it"


class FakeTime:
    """time.monotonic and time.sleep on a clock the reads advance, so no test sleeps."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.now = 1000.0
        monkeypatch.setattr(time, "monotonic", lambda: self.now)
        monkeypatch.setattr(time, "sleep", self.sleep)

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_unanswered_reads_are_given_up_soon_having_told_the_rules_hint(monkeypatch):
    clock, calls, told = FakeTime(monkeypatch), [], []

    def dropped() -> str:
        calls.append(clock.now)
        clock.now += CONNECT_TIMEOUT_S
        raise ChannelUnanswered("cannot reach the controller of lap at 198.18.0.100:8443: no answer", hint=HINT)

    started = clock.now
    with pytest.raises(ChannelUnanswered) as raised:
        patience.patiently(dropped, told.append)
    assert raised.value.hint == HINT  # what the command prints on its way out (exit 1)
    # Not a reboot's five minutes: within the unanswered wait and the last try's timeout.
    assert clock.now - started <= CONNECT_TIMEOUT_S + patience.UNANSWERED_WAIT_S + CONNECT_TIMEOUT_S
    assert len(calls) >= 2  # tried again, in case it was a moment's loss
    assert len(told) == 1 and "podmanager access add -c lap" in told[0], told


def test_a_refusing_controller_is_waited_on_as_a_reboot_and_its_answer_taken(monkeypatch):
    clock, told = FakeTime(monkeypatch), []
    back_at = clock.now + 120.0  # two minutes of a reboot: longer than the unanswered wait

    def rebooting() -> str:
        if clock.now < back_at:
            raise ChannelError("cannot reach the controller of lap at 198.18.0.100:8443: connection refused")
        return "answer"

    assert patience.patiently(rebooting, told.append) == "answer"
    assert len(told) == 1 and "waiting for the controller" in told[0]


def test_a_refusal_between_unanswered_tries_starts_their_wait_again(monkeypatch):
    clock, answers = FakeTime(monkeypatch), iter(["unanswered", "refused"] * 4 + ["ok"])

    def flapping() -> str:
        clock.now += CONNECT_TIMEOUT_S
        kind = next(answers)
        if kind == "unanswered":
            raise ChannelUnanswered("no answer", hint=HINT)
        if kind == "refused":
            raise ChannelError("refused")
        return kind

    assert patience.patiently(flapping) == "ok"
