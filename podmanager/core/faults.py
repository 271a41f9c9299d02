"""One simulator fault, wherever it is written: a pydantic union discriminated on `kind`.

Every place that names a fault builds one of these, so each kind is checked once and has
one set of defaults:

- the spec's `simulation.faults` (YAML mappings, `core/spec.py`), armed by
  `api/simulation.arm_scripted_faults` when a cluster is first brought up;
- `podmanager sim inject FAULT...` and the emulator (`podmanager emulator --fault`, its
  control service's `fault` call, `python -m podmanager.emulator.control inject`), as text
  (`parse`; the grammar is in `core/fault_text.py`);
- `podmanager sim preempt | fail-create | hang`, from their flags (`from_flags`).

Defaults (the constants are in `core/fault_text.py`, shared with `SimCloud`'s own methods):

- `times`: 1 for every kind: a fault hits once unless told otherwise. A create fault
  (capacity, reservation, preempt-while-creating) may say `times: -1` to fail every create
  until a `clear`; "until cleared" is never a default (the emulator's text used to default
  to it: write `capacity:ZONE:-1` for that now).
- `quota`: TPUV4PodPerProjectPerZoneForTPUAPI; `after_s`, `notice_s`: 0; `worker`: 0.

`apply(sim, cluster=...)` injects the fault into anything with the simulator's inject
methods (`FaultTarget`: `SimCloud`, or `EmulatorControl` for a running emulator). A
`preempt` names a slice of a cluster, so it needs `cluster`; the simulator preempts
whichever node holds the slice `after_s` from now; a `degrade` names one too (the node that
holds it turns its `health` TIMEOUT or UNHEALTHY_MAINTENANCE), and so does a `maintenance` (host
maintenance announced on its node, then done). A `hang` is no cloud fault: it freezes the
program on one host, which takes the cluster's host agents, so `api/simulation.py` applies
it and `apply` refuses it.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, Protocol, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
)
from pydantic_core import ErrorDetails

from podmanager.core.errors import SpecError
from podmanager.core.fault_text import (
    CREATE_KINDS,
    DEFAULT_HEALTH,
    DEFAULT_MAINTENANCE_S,
    DEFAULT_QUOTA,
    DEFAULT_TIMES,
    DEFAULT_WORKER,
    DEGRADED_HEALTH,
    FAULT_HELP,
    KINDS,
    TEXT_FIELDS,
    TEXT_FORMS,
    UNTIL_CLEARED,
    seconds,
    to_fields,
)


class FaultTarget(Protocol):
    """The simulator's inject methods: what `apply` calls (`SimCloud`, `EmulatorControl`)."""

    def inject_create_fault(self, zone: str, kind: str, times: int = DEFAULT_TIMES) -> None: ...

    def inject_quota(self, quota: str = DEFAULT_QUOTA, times: int = DEFAULT_TIMES) -> None: ...

    def inject_transient(self, calls: int) -> None: ...

    def deny_secret_reads(self, reads: int) -> None: ...

    def clear_faults(self) -> None: ...

    def preempt_slice_later(self, cluster: str, slice_index: int, after_s: float, notice_s: float = 0.0) -> None: ...

    def degrade_slice_later(self, cluster: str, slice_index: int, after_s: float, health: str,
                            for_s: float | None = None) -> None: ...

    def maintain_slice_later(self, cluster: str, slice_index: int, after_s: float, notice_s: float = 0.0,
                             duration_s: float = DEFAULT_MAINTENANCE_S) -> None: ...


def _duration(value: Any) -> Any:
    return seconds(value) if isinstance(value, str) else value


# At most a day: a larger delay is a typo (milliseconds for seconds), and no test waits that long.
A_DAY_S = 86400.0
Seconds = Annotated[float, BeforeValidator(_duration), Field(ge=0, le=A_DAY_S)]


def _positive(times: int) -> int:
    if times < 1:
        raise ValueError(f"{times} is not a count; use 1 or more ({UNTIL_CLEARED}, until cleared, "
                         "is for capacity, reservation and preempt-while-creating faults)")
    return times


Count = Annotated[int, AfterValidator(_positive)]  # how many times a fault hits; never "until cleared"


class _Fault(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str

    def apply(self, sim: FaultTarget, *, cluster: str | None = None) -> None:
        raise NotImplementedError

    def describe(self) -> str:
        """What the fault does, for events and the CLI."""
        raise NotImplementedError

    def text(self) -> str:
        """The fault as text, every field given: `parse(fault.text()) == fault`."""
        values = [getattr(self, name) for name in TEXT_FIELDS[self.kind]]
        return ":".join([self.kind, *(f"{v:g}" if isinstance(v, float) else str(v) for v in values)])

    def _cluster(self, cluster: str | None, what: str, command: str) -> str:
        """The cluster a fault on one of its slices needs; refused, saying where to give it, without one."""
        if cluster is None:
            raise SpecError(f"{self.text()}: {what} names a slice of a cluster, and no cluster is given; "
                            f"script it in the cluster's spec, use '{command}', or name the cluster to the "
                            "emulator's control ('inject --cluster NAME', fault(text, cluster=NAME))")
        return cluster


class CreateFault(_Fault):
    """The next `times` creates in `zone` fail (the operation ends in this error)."""

    kind: Literal["capacity", "reservation", "preempt-while-creating", "invalid-request"]
    zone: str = Field(min_length=1, description="the zone whose creates fail, e.g. us-central2-b")
    times: int = Field(DEFAULT_TIMES, description=f"how many creates fail ({UNTIL_CLEARED}: until cleared)")

    @field_validator("times")
    @classmethod
    def _count(cls, times: int) -> int:
        if times != UNTIL_CLEARED and times < 1:
            raise ValueError(f"{times} is not a count; use 1 or more, or {UNTIL_CLEARED} to fail every create "
                             "until cleared")
        return times

    def apply(self, sim: FaultTarget, *, cluster: str | None = None) -> None:
        sim.inject_create_fault(self.zone, self.kind, self.times)

    def describe(self) -> str:
        if self.times == UNTIL_CLEARED:
            return f"every create in {self.zone} fails with {self.kind} until cleared"
        return f"the next {self.times} create(s) in {self.zone} fail with {self.kind}"


class QuotaFault(_Fault):
    """The next `times` creates are refused at once: quota `quota` exceeded."""

    kind: Literal["quota"]
    quota: str = Field(DEFAULT_QUOTA, min_length=1, description="the quota named in the error")
    times: Count = Field(DEFAULT_TIMES, description="how many creates fail")

    def apply(self, sim: FaultTarget, *, cluster: str | None = None) -> None:
        sim.inject_quota(self.quota, self.times)

    def describe(self) -> str:
        return f"the next {self.times} create(s) fail with quota {self.quota} exceeded"


class TransientFault(_Fault):
    """The next `times` API calls fail with UNAVAILABLE (the client retries them)."""

    kind: Literal["transient"]
    times: Count = Field(DEFAULT_TIMES, description="how many API calls fail")

    def apply(self, sim: FaultTarget, *, cluster: str | None = None) -> None:
        sim.inject_transient(self.times)

    def describe(self) -> str:
        return f"the next {self.times} API call(s) fail with UNAVAILABLE"


class SecretDeniedFault(_Fault):
    """The next `times` reads of a secret by a VM (its startup script fetching the Ray token)
    are refused with PERMISSION_DENIED, as an IAM deny policy or a grant not yet in effect
    would refuse them; podmanager's own calls are not."""

    kind: Literal["secret-denied"]
    times: Count = Field(DEFAULT_TIMES, description="how many reads by VMs are refused")

    def apply(self, sim: FaultTarget, *, cluster: str | None = None) -> None:
        sim.deny_secret_reads(self.times)

    def describe(self) -> str:
        return f"the next {self.times} read(s) of a secret by a VM are refused with PERMISSION_DENIED"


class ClearFault(_Fault):
    """Every pending create, quota, transient and secret fault and scripted preemption is dropped."""

    kind: Literal["clear"]

    def apply(self, sim: FaultTarget, *, cluster: str | None = None) -> None:
        sim.clear_faults()

    def describe(self) -> str:
        return "pending faults cleared"


class PreemptFault(_Fault):
    """Whichever node holds slice `slice` is preempted `after_s` from now, announced
    `notice_s` before (spot: PREEMPTED, else TERMINATED)."""

    kind: Literal["preempt"]
    slice: int = Field(ge=0, description="the slice index, e.g. 0")
    after_s: Seconds = Field(0.0, description="seconds from now (a scripted one: from the first `up`)")
    notice_s: Seconds = Field(0.0, description="seconds of notice the metadata server gives")

    def apply(self, sim: FaultTarget, *, cluster: str | None = None) -> None:
        sim.preempt_slice_later(self._cluster(cluster, "a preemption", "podmanager sim"), self.slice, self.after_s, self.notice_s)

    def describe(self) -> str:
        return (f"slice {self.slice} is preempted " + (f"{self.after_s:g}s from now" if self.after_s else "now")
                + (f" with {self.notice_s:g}s notice" if self.notice_s else ""))


class HangFault(_Fault):
    """The program on host `slice`/`worker` freezes (SIGSTOP) `after_s` into a run."""

    kind: Literal["hang"]
    slice: int = Field(ge=0, description="the slice index, e.g. 0")
    worker: int = Field(DEFAULT_WORKER, ge=0, description="the host's worker id in its slice")
    after_s: Seconds = Field(0.0, description="seconds into the run (a scripted one)")

    def apply(self, sim: FaultTarget, *, cluster: str | None = None) -> None:
        raise SpecError(f"{self.text()}: a hang freezes a program on a host, not the cloud; a cluster's spec "
                        "scripts it, or 'podmanager sim hang' freezes one now")

    def describe(self) -> str:
        return f"the program on host {self.slice}/{self.worker} freezes {self.after_s:g}s into the run"


def _health(value: Any) -> Any:
    return value.strip().upper() if isinstance(value, str) else value


class DegradeFault(_Fault):
    """Whichever READY node holds slice `slice` turns unhealthy `after_s` from now: its
    `Node.health` is `health` (TIMEOUT or UNHEALTHY_MAINTENANCE) for `for_s` (0: until it is
    replaced). `up` and the supervisor wait such a slice out for a bounded time, then replace it."""

    kind: Literal["degrade"]
    slice: int = Field(ge=0, description="the slice index, e.g. 0")
    health: Annotated[Literal["TIMEOUT", "UNHEALTHY_MAINTENANCE"], BeforeValidator(_health)] = Field(
        DEFAULT_HEALTH, description=f"the health it turns to: {' or '.join(DEGRADED_HEALTH)}")
    after_s: Seconds = Field(0.0, description="seconds from now (a scripted one: from the first `up`)")
    for_s: Seconds = Field(0.0, description="seconds until it is HEALTHY again; 0: until it is replaced")

    def apply(self, sim: FaultTarget, *, cluster: str | None = None) -> None:
        sim.degrade_slice_later(self._cluster(cluster, "a degrade", "podmanager sim inject"), self.slice, self.after_s, self.health, self.for_s or None)

    def describe(self) -> str:
        return (f"slice {self.slice} turns {self.health} "
                + (f"{self.after_s:g}s from now" if self.after_s else "now")
                + (f" for {self.for_s:g}s" if self.for_s else " until it is replaced"))


class MaintenanceFault(_Fault):
    """`after_s` from now, host maintenance is announced on whichever READY node holds slice
    `slice` (its VMs' metadata serves it as `upcoming-maintenance`); its window opens `notice_s`
    later, and the node is REPAIRING for `duration_s`, then READY."""

    kind: Literal["maintenance"]
    slice: int = Field(ge=0, description="the slice index, e.g. 0")
    after_s: Seconds = Field(0.0, description="seconds from now until it is announced (a scripted one: from the "
                                              "first `up`)")
    notice_s: Seconds = Field(0.0, description="seconds from the announcement until the window opens")
    duration_s: Seconds = Field(DEFAULT_MAINTENANCE_S, description="seconds the node is REPAIRING")

    def apply(self, sim: FaultTarget, *, cluster: str | None = None) -> None:
        sim.maintain_slice_later(self._cluster(cluster, "a maintenance", "podmanager sim inject"), self.slice, self.after_s, self.notice_s, self.duration_s)

    def describe(self) -> str:
        return (f"maintenance of slice {self.slice} is announced "
                + (f"{self.after_s:g}s from now" if self.after_s else "now")
                + f", its window opening {self.notice_s:g}s later, REPAIRING for {self.duration_s:g}s")


FaultKind = Union[CreateFault, QuotaFault, TransientFault, SecretDeniedFault, ClearFault, PreemptFault, HangFault,
                  DegradeFault, MaintenanceFault]
MODELS: dict[str, type[_Fault]] = {kind: model for model in FaultKind.__args__  # type: ignore[attr-defined]
                                   for kind in model.model_fields["kind"].annotation.__args__}

# What specs stored by earlier versions hold: every kind's fields, unused ones at these values.
_OLD_UNUSED = {"slice": None, "zone": None, "after_s": 0.0, "notice_s": 0.0, "times": 1}


def _normalize(value: Any) -> Any:
    """Text -> its fields; a mapping loses the unused fields a stored spec of an earlier
    version carries (`zone: null` on a preemption)."""
    if isinstance(value, str):
        return to_fields(value)
    if isinstance(value, Mapping) and value.get("kind") in MODELS:
        used = MODELS[value["kind"]].model_fields
        return {k: v for k, v in value.items() if k in used or k not in _OLD_UNUSED or v != _OLD_UNUSED[k]}
    return value


Fault = Annotated[FaultKind, Field(discriminator="kind"), BeforeValidator(_normalize)]
_ADAPTER: TypeAdapter[FaultKind] = TypeAdapter(Fault)


def explain(error: ErrorDetails) -> tuple[str | None, str]:
    """One validation error inside a fault -> (the field it is about, or None for the fault
    as a whole; what is wrong and how to write it)."""
    loc, kind = error["loc"], error["type"]
    if kind == "union_tag_invalid":
        return "kind", f"{error.get('ctx', {}).get('tag')!r} is not a fault kind; use one of {', '.join(KINDS)}"
    if kind == "union_tag_not_found":
        return "kind", f"required field is missing; use one of {', '.join(KINDS)}"
    message = error["msg"].removeprefix("Value error, ")
    if len(loc) < 2:  # the fault as a whole: bad text, or not a mapping
        return None, message
    tag, field = str(loc[0]), str(loc[1])
    fields = MODELS[tag].model_fields if tag in MODELS else {}
    if kind == "missing":
        what = fields[field].description if field in fields else None
        return None, f"a {tag!r} fault needs {field!r}" + (f" ({what})" if what else "")
    if kind == "extra_forbidden":
        close = difflib.get_close_matches(field, list(fields), n=1, cutoff=0.6)
        return field, (f"a {tag!r} fault has no {field!r}; "
                       + (f"did you mean {close[0]}?" if close else f"its fields are {', '.join(fields)}"))
    return field, message


def _check(data: Any, line: Callable[[str | None, str], str], hint: str | None = None) -> FaultKind:
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as invalid:
        lines = [line(*explain(error)) for error in invalid.errors()]
        raise SpecError("\n".join(lines), hint=hint) from None


def parse(text: str, *, flag: str = "fault") -> FaultKind:
    """One fault from its text ('capacity:us-central2-b:2'); a SpecError names `flag`, the
    text, what is wrong and the form to write."""
    kind = text.strip().partition(":")[0]
    form = f"Write it as {TEXT_FORMS[kind]}." if kind in TEXT_FORMS else f"Faults: {FAULT_HELP}."
    return _check(text, lambda field, message: f"{flag}: {text!r}: " + (f"{field}: " if field else "") + message,
                  hint=form)


def from_flags(values: Mapping[str, Any], flags: Mapping[str, str]) -> FaultKind:
    """One fault from command-line flags (`flags`: field -> the flag that sets it); a
    SpecError names the flag."""
    return _check(dict(values), lambda field, message: f"{flags.get(field or 'kind', '--kind')}: {message}")


def validate(data: Any) -> FaultKind:
    """One fault from a mapping, text or a fault; a SpecError names the field."""
    return _check(data, lambda field, message: f"{field}: {message}" if field else message)


__all__ = [
    "CREATE_KINDS", "ClearFault", "CreateFault", "DegradeFault", "Fault", "FaultKind", "FaultTarget", "HangFault", "MaintenanceFault", "PreemptFault",
    "QuotaFault", "SecretDeniedFault", "TransientFault", "explain", "from_flags", "parse", "validate",
]
