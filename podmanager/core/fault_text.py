"""A simulator fault written as one line of text, and the defaults every form of a fault shares.

The fault type itself (validation, `apply`) is `core/faults.py`. This module holds what
the command line needs without loading pydantic (`--help` shows `FAULT_HELP`): the text
grammar, the defaults, durations.

    capacity:ZONE[:TIMES]   reservation:ZONE[:TIMES]   preempt-while-creating:ZONE[:TIMES]
    quota[:QUOTA[:TIMES]]   transient[:TIMES]   secret-denied[:TIMES]   clear
    preempt:SLICE[:AFTER_S[:NOTICE_S]]   hang:SLICE[:WORKER[:AFTER_S]]
    degrade:SLICE[:HEALTH[:AFTER_S[:FOR_S]]]   maintenance:SLICE[:AFTER_S[:NOTICE_S[:DURATION_S]]]

An empty part takes the default (`quota::3`); durations take `10`, `10s` or `1m`.
"""

from __future__ import annotations

import re

from podmanager.core.errors import SpecError

# The one set of defaults, for the spec, `podmanager sim`, the emulator and SimCloud alike.
DEFAULT_TIMES = 1  # a fault hits once unless told otherwise
UNTIL_CLEARED = -1  # `times: -1`: a create fault that hits every create until `clear`
DEFAULT_QUOTA = "TPUV4PodPerProjectPerZoneForTPUAPI"
DEFAULT_WORKER = 0
CREATE_KINDS = ("capacity", "reservation", "preempt-while-creating", "invalid-request")
# What a `degrade` may turn a node's `health` to: the two that provisioning and the supervisor
# wait out for a bounded time, then replace (cloud/base.py's HEALTH_DECISIONS).
DEGRADED_HEALTH = ("TIMEOUT", "UNHEALTHY_MAINTENANCE")
DEFAULT_HEALTH = "TIMEOUT"
DEFAULT_MAINTENANCE_S = 60.0  # how long a simulated maintenance keeps a node REPAIRING

# Each kind's fields in the order its text gives them.
TEXT_FIELDS: dict[str, tuple[str, ...]] = {
    **{kind: ("zone", "times") for kind in CREATE_KINDS},
    "quota": ("quota", "times"),
    "transient": ("times",),
    "secret-denied": ("times",),
    "clear": (),
    "preempt": ("slice", "after_s", "notice_s"),
    "hang": ("slice", "worker", "after_s"),
    "degrade": ("slice", "health", "after_s", "for_s"),
    "maintenance": ("slice", "after_s", "notice_s", "duration_s"),
}
KINDS = tuple(TEXT_FIELDS)

TEXT_FORMS: dict[str, str] = {
    **{kind: f"{kind}:ZONE[:TIMES]" for kind in CREATE_KINDS},
    "quota": "quota[:QUOTA[:TIMES]]",
    "transient": "transient[:TIMES]",
    "secret-denied": "secret-denied[:TIMES]",
    "clear": "clear",
    "preempt": "preempt:SLICE[:AFTER_S[:NOTICE_S]]",
    "hang": "hang:SLICE[:WORKER[:AFTER_S]]",
    "degrade": "degrade:SLICE[:HEALTH[:AFTER_S[:FOR_S]]]",
    "maintenance": "maintenance:SLICE[:AFTER_S[:NOTICE_S[:DURATION_S]]]",
}

FAULT_HELP = (
    "capacity:ZONE[:TIMES] | reservation:ZONE[:TIMES] | preempt-while-creating:ZONE[:TIMES] | "
    "invalid-request:ZONE[:TIMES] | "
    "quota[:QUOTA[:TIMES]] | transient[:TIMES] | secret-denied[:TIMES] | preempt:SLICE[:AFTER_S[:NOTICE_S]] | "
    "hang:SLICE[:WORKER[:AFTER_S]] | degrade:SLICE[:HEALTH[:AFTER_S[:FOR_S]]] | "
    "maintenance:SLICE[:AFTER_S[:NOTICE_S[:DURATION_S]]] | clear; "
    f"TIMES defaults to {DEFAULT_TIMES} "
    f"({UNTIL_CLEARED}: a create fault until cleared)"
)


def to_fields(text: str) -> dict[str, str]:
    """'capacity:zone-a:2' -> {'kind': 'capacity', 'zone': 'zone-a', 'times': '2'} (values
    stay text; the fault type converts and checks them). ValueError names the fix."""
    kind, *parts = text.strip().split(":")
    names = TEXT_FIELDS.get(kind)
    if names is None:
        raise ValueError(f"{kind!r} is not a fault kind; use one of {', '.join(KINDS)}")
    if len(parts) > len(names):
        raise ValueError(f"too many ':' parts for a {kind!r} fault; write it as {TEXT_FORMS[kind]}")
    fields = {"kind": kind}
    fields.update((name, value.strip()) for name, value in zip(names, parts) if value.strip())
    return fields


def seconds(text: str) -> float:
    """'10', '10s', '1.5m' -> seconds; ValueError says what is accepted."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|m|)\s*", text)
    if not match:
        raise ValueError(f"{text!r} is not a duration; use seconds like 10 or 10s, or minutes like 1m")
    return float(match.group(1)) * (60 if match.group(2) == "m" else 1)


def parse_duration(text: str, flag: str) -> float:
    """`seconds` for a flag: a SpecError that names it."""
    try:
        return seconds(text)
    except ValueError as bad:
        raise SpecError(f"{flag}: {bad}") from None
