"""A TPU VM's own warning that it is about to go: the GCE metadata server.

`instance/preempted` turns TRUE when a spot/preemptible VM is being preempted. TPU host
maintenance is announced as upcoming maintenance (Cloud TPU's "View maintenance
notifications"; the v2alpha1 API's `Node.upcoming_maintenance`), which a VM reads at
`instance/upcoming-maintenance?alt=json`: a JSON object with `window_start_time`,
`maintenance_status` (PENDING, ONGOING), `type` (SCHEDULED, UNSCHEDULED), ... Either gives the
program a window to checkpoint, which other tools waste by polling the TPU API.

`instance/maintenance-event` is not read: Compute Engine fills it only for VMs that
live-migrate or have a GPU, and a TPU VM is neither (it terminates on maintenance).

With nothing announced the metadata server has been seen to answer an empty object, a JSON
`{"error": "no notifications ..."}` with 503, `NONE`, or 404 (a VM without the key): all of
them are "no notice". Scheduled maintenance is announced about a week ahead, so a notice
fires only once the window is `MAINTENANCE_LEAD_S` away or the maintenance is under way; a
notice whose window cannot be read fires at once (better an early checkpoint than none).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime

from podmanager.vm.boot_status import metadata_root

METADATA_URL = "http://metadata.google.internal/computeMetadata/v1/instance/"  # off a simulated VM
UPCOMING_MAINTENANCE = "upcoming-maintenance?alt=json"
# How long before a maintenance window opens the program is told: time for a checkpoint and a
# clean stop, then the slice is replaced (on other hosts) before the maintenance takes it.
MAINTENANCE_LEAD_S = 600.0


@dataclass(frozen=True)
class UpcomingMaintenance:
    """One `upcoming-maintenance` answer, as far as the watch needs it."""

    status: str  # PENDING, ONGOING, or "" when not given
    kind: str  # SCHEDULED, UNSCHEDULED, or ""
    window_start: float | None  # epoch seconds; None when absent or unreadable

    def due(self, now: float, lead_s: float = MAINTENANCE_LEAD_S) -> bool:
        """Whether the program should be told now."""
        if self.status == "ONGOING" or self.window_start is None:
            return True
        return self.window_start - now <= lead_s

    def describe(self) -> str:
        when = (datetime.fromtimestamp(self.window_start).astimezone().isoformat(timespec="seconds")
                if self.window_start is not None else "an unknown time")
        return f"maintenance: {self.kind or 'host maintenance'} {self.status or 'announced'}, window opens {when}"


def metadata_url() -> str:
    """This VM's metadata server's `instance/` (`boot_status.metadata_root`: the one rule for where it is)."""
    return f"{metadata_root()}/instance/"


def _read(base_url: str, key: str, timeout_s: float) -> str | None:
    """The value at `key`, or None for anything but a 200 (a 503 or 404 says nothing either)."""
    request = urllib.request.Request(base_url + key, headers={"Metadata-Flavor": "Google"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.read().decode().strip()
    except (urllib.error.URLError, OSError):
        return None


def _time(value: object) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def parse_upcoming_maintenance(text: str | None) -> UpcomingMaintenance | None:
    """An `upcoming-maintenance` answer -> the maintenance it announces, or None for any of the
    ways it says there is none. Fields are read in the metadata server's snake_case and in the
    API's camelCase, since Google's pages show both."""
    try:
        value = json.loads(text) if text else None
    except ValueError:
        return None  # NONE, or anything else that is not an announcement
    if not isinstance(value, dict) or not value or "error" in value:
        return None

    def field(snake: str, camel: str) -> object:
        return value.get(snake, value.get(camel))

    status, kind = field("maintenance_status", "maintenanceStatus"), field("type", "maintenanceType")
    return UpcomingMaintenance(status=str(status or "").upper(), kind=str(kind or "").upper(),
                               window_start=_time(field("window_start_time", "windowStartTime")))


def metadata_notice(base_url: str | None = None, timeout_s: float = 1.0, *, now: float | None = None) -> str | None:
    """Why this VM is about to be lost, or None. Off Google Cloud (no metadata server) None."""
    base_url = base_url or metadata_url()
    if (_read(base_url, "preempted", timeout_s) or "").upper() == "TRUE":
        return "preempted"
    maintenance = parse_upcoming_maintenance(_read(base_url, UPCOMING_MAINTENANCE, timeout_s))
    if maintenance is not None and maintenance.due(time.time() if now is None else now):
        return maintenance.describe()
    return None
