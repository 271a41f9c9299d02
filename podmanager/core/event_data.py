"""What each kind of event holds beside its message: one typed record per `EventKind`.

The store's writer (`state/store.py::StateStore.add_event`) checks an event's fields against
its kind's record, so a misspelt or mistyped field fails where it is written, as a misspelt
kind does. Every field may be absent (the log never required one: a writer says what it
knows), but one that is there has its kind's name and type. The log keeps the fields as JSON,
as it always has: a row written before these records existed still reads (`stored`),
whatever it holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, JsonValue, ValidationError

from podmanager.core.events import EventKind


class EventData(BaseModel):
    """The fields every event may carry: the run that caused it, if one did."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str | None = None

    def as_json(self) -> dict[str, JsonValue]:
        """The fields its writer gave, as the log keeps them (and the page and the channel show them)."""
        return self.model_dump(mode="json", exclude_unset=True)


class OldEventData(EventData):
    """A row of a kind no longer written, or one whose fields no longer read as its kind's:
    kept as it was, every field as the log holds it."""

    model_config = ConfigDict(frozen=True, extra="allow")


class AttemptData(EventData):
    attempt: int | None = None


class CheckpointData(AttemptData):
    step: int | None = None
    saved_at: float | None = None


class HostsJoiningData(EventData):
    expected: int | None = None
    joined: int | None = None


class HostBootData(EventData):
    node: str | None = None
    worker: int | None = None
    stage: str | None = None
    detail: str | None = None


class IncidentData(EventData):
    cause: str | None = None
    slices: list[int] | None = None


class NodeData(EventData):
    """A slice's node, where it is, and (some kinds) what became of it."""

    node: str | None = None
    zone: str | None = None
    reason: str | None = None  # slice_deleting: why
    state: str | None = None  # slice_waiting: the node's or queued resource's state
    while_creating: bool | None = None  # slice_preempted: before it was ever READY
    error: str | None = None  # zone_fallback: what the zone answered


class QueuedResourceData(EventData):
    name: str | None = None
    zone: str | None = None


class ResumedData(EventData):
    recover_s: float | None = None
    lost_steps: int | None = None


class RetryData(EventData):
    call: str | None = None


class SlicesData(EventData):
    """The run's slices after a change, and the ones it lost or gave."""

    slices: list[int] | None = None
    lost: list[int] | int | None = None  # run_shrunk: the lost slices; spare_swapped: the one replaced
    spare: int | None = None  # spare_swapped: the spare that took its place
    step: int | None = None  # run_grew: the step it grows back at
    phases: dict[str, float] | None = None  # slices_replaced: seconds per phase
    since: float | None = None  # slices_replaced: when the new slices were asked for


class ServiceData(EventData):
    service_id: str | None = None


class SetupDoneData(AttemptData):
    seconds: float | None = None
    installed: list[str] | None = None


class SetupProgressData(EventData):
    ready: int | None = None
    hosts: int | None = None


class SparePreparedData(EventData):
    host: str | None = None
    seconds: float | None = None


class SpareUpkeepData(EventData):
    slices: list[int] | None = None


class SpareReadyData(EventData):
    node: str | None = None


class PlannedChange(BaseModel):
    """One slice's change in `up`'s plan (`provisioning/plan.py::SliceChange`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str
    slice: int | None
    node: str
    accelerator: str
    zone: str | None
    reason: str
    edited: bool = False


class UpPlanData(EventData):
    changes: list[PlannedChange] | None = None
    spares: str | None = None  # what the hot spares cost, said once


class WaitingData(EventData):
    """Whom a verb waits for: the controller's job, or the process holding the cluster's lock."""

    holder_job: str | None = None
    holder_pid: int | None = None
    holder_verb: str | None = None


# Every kind's record; a kind with no fields beyond the run carries `EventData`.
PAYLOADS: dict[EventKind, type[EventData]] = {kind: EventData for kind in EventKind} | {
    EventKind.ATTEMPT_STARTED: AttemptData,
    EventKind.REATTACHED: AttemptData,
    EventKind.SETUP_STARTED: AttemptData,
    EventKind.CHECKPOINT_SAVED: CheckpointData,
    EventKind.HOSTS_JOINING: HostsJoiningData,
    EventKind.HOST_BOOT: HostBootData,
    EventKind.HOST_BOOT_FAILED: HostBootData,
    EventKind.INCIDENT: IncidentData,
    EventKind.SLICE_CREATING: NodeData,
    EventKind.SLICE_QUEUED: NodeData,
    EventKind.SLICE_WAITING: NodeData,
    EventKind.SLICE_READY: NodeData,
    EventKind.SLICE_PREEMPTED: NodeData,
    EventKind.SLICE_REPAIRING: NodeData,
    EventKind.SLICE_REPAIRED: NodeData,
    EventKind.SLICE_DELETING: NodeData,
    EventKind.SLICE_DELETED: NodeData,
    EventKind.ZONE_FALLBACK: NodeData,
    EventKind.QUEUED_RESOURCE_DELETING: QueuedResourceData,
    EventKind.RESUMED: ResumedData,
    EventKind.RETRY: RetryData,
    EventKind.RUN_GREW: SlicesData,
    EventKind.RUN_SHRUNK: SlicesData,
    EventKind.SPARE_SWAPPED: SlicesData,
    EventKind.SLICES_DELETED: SlicesData,
    EventKind.SLICES_REPLACED: SlicesData,
    EventKind.SERVICE_STARTING: ServiceData,
    EventKind.SERVICE_CANCELLED: ServiceData,
    EventKind.SETUP_DONE: SetupDoneData,
    EventKind.SETUP_PROGRESS: SetupProgressData,
    EventKind.SPARE_PREPARED: SparePreparedData,
    EventKind.SPARE_UPKEEP: SpareUpkeepData,
    EventKind.SPARE_READY: SpareReadyData,
    EventKind.UP_PLAN: UpPlanData,
    EventKind.WAITING: WaitingData,
}


def payload(kind: EventKind, fields: dict[str, Any]) -> EventData:
    """The kind's record of `fields`, checked: a field the kind does not hold, or of the wrong
    type, raises (pydantic's ValidationError names it)."""
    return PAYLOADS[kind].model_validate(fields)


def stored(kind: str, fields: dict[str, Any]) -> EventData:
    """A logged event's record as the log holds it: its kind's when the fields read as such,
    else as they were (an old row of another shape, a kind no longer written)."""
    try:
        return PAYLOADS[EventKind(kind)].model_validate(fields)
    except (ValueError, ValidationError):  # ValidationError is a ValueError too: named for the reader
        return OldEventData.model_validate(fields)


@dataclass(frozen=True)
class Event:
    """One event of a cluster's log as every reader takes it: read from the store
    (`state/store.py`), or on the user's machine from the channel's `EventRecord`."""

    id: int
    cluster: str
    time: float
    kind: str  # an `EventKind`'s value; an old log may hold one no longer written
    slice_index: int | None
    message: str
    data: EventData  # the kind's record, above

    @property
    def run_id(self) -> str | None:
        """The run that caused this event, if one did."""
        return self.data.run_id

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "time": self.time,
            "kind": self.kind,
            "slice": self.slice_index,
            "message": self.message,
            **({"data": fields} if (fields := self.data.as_json()) else {}),
        }
