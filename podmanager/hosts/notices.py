"""A TPU VM's own warning that it is about to go: the GCE metadata server.

`instance/preempted` turns TRUE when a spot/preemptible VM is being preempted, and
`instance/maintenance-event` names a host maintenance about to happen. Either gives the
program a short window to checkpoint, which other tools waste by polling the TPU API.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request

METADATA_URL = "http://metadata.google.internal/computeMetadata/v1/instance/"


def metadata_url() -> str:
    """This VM's metadata server: `GCE_METADATA_IP` (host:port) where set, as Google's own
    libraries and JAX honour it (a simulated VM points it at its own server)."""
    address = os.environ.get("GCE_METADATA_IP")
    return f"http://{address}/computeMetadata/v1/instance/" if address else METADATA_URL


def _read(base_url: str, key: str, timeout_s: float) -> str | None:
    request = urllib.request.Request(base_url + key, headers={"Metadata-Flavor": "Google"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.read().decode().strip()
    except (urllib.error.URLError, OSError):
        return None


def metadata_notice(base_url: str | None = None, timeout_s: float = 1.0) -> str | None:
    """Why this VM is about to be lost, or None. Off Google Cloud (no metadata server) None."""
    base_url = base_url or os.environ.get("PODMANAGER_METADATA_URL") or metadata_url()
    if (_read(base_url, "preempted", timeout_s) or "").upper() == "TRUE":
        return "preempted"
    event = _read(base_url, "maintenance-event", timeout_s)
    if event and event.upper() not in ("NONE", ""):
        return f"maintenance: {event}"
    return None
