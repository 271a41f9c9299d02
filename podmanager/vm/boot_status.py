"""A host's boot, as it tells it: guest attributes under `podmanager/` on its metadata server.

The startup script and the join write them (`PUT .../instance/guest-attributes/podmanager/KEY`,
through `guest_attributes.py`: a value only when it changed, within Google's rate);
`up` and `status` read them through the Cloud TPU API (`GetGuestAttributes`), so why a host
never joined is visible without SSH. Keys: `boot` (installing, token, joining, joined, error),
`boot-detail` (the error and the last lines of what failed), `versions` (what the host runs:
"python=3.11.7 ray=2.60.0 jax=0.10.2 podmanager=0.1.0+h...").
"""

from __future__ import annotations

import logging
import os
import urllib.error
import urllib.request
from dataclasses import dataclass

from podmanager.vm import guest_attributes

log = logging.getLogger(__name__)

NAMESPACE = guest_attributes.NAMESPACE
STAGE_KEY, DETAIL_KEY, VERSIONS_KEY = "boot", "boot-detail", "versions"
ERROR = "error"
JOINED = "joined"


def metadata_root() -> str:
    """This VM's metadata server: `GCE_METADATA_IP` (host:port) where set, as Google's own
    libraries and JAX honour it (a simulated VM points it at its own server)."""
    return f"http://{os.environ.get('GCE_METADATA_IP') or 'metadata.google.internal'}/computeMetadata/v1"


def read_metadata(path: str, *, timeout_s: float = 5.0, wait_for_change: bool = False) -> str | None:
    """A value from this VM's metadata server (`path` below computeMetadata/v1/), None if absent
    or unreachable. `wait_for_change`: the long poll, answering when the value changes."""
    url = f"{metadata_root()}/{path}" + ("?wait_for_change=true" if wait_for_change else "")
    request = urllib.request.Request(url, headers={"Metadata-Flavor": "Google"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.read().decode()
    except (OSError, urllib.error.URLError):
        return None


def report(stage: str, detail: str = "") -> None:
    """Tell `up` this host's boot stage; a host that cannot say so still boots."""
    for key, value in ((STAGE_KEY, stage), (DETAIL_KEY, detail)):
        put_attribute(key, value)


def put_attribute(key: str, value: str) -> bool:
    """The guest attribute podmanager/KEY of this VM, written only when it changed and within
    Google's rate (`guest_attributes.py`); whether it is there."""
    try:
        return guest_attributes.publish(key, value)
    except OSError as error:
        log.warning("could not report %s: %s", key, error)
        return False


@dataclass(frozen=True)
class BootStatus:
    """One host's boot as its guest attributes say ("" where it said nothing yet)."""

    stage: str = ""
    detail: str = ""
    versions: str = ""

    @property
    def failed(self) -> bool:
        return self.stage == ERROR

    @classmethod
    def from_attributes(cls, values: dict[str, str]) -> BootStatus:
        """From one worker's attributes, keyed "podmanager/KEY" or "KEY"."""
        plain = {key.rsplit("/", 1)[-1]: value for key, value in values.items()}
        return cls(plain.get(STAGE_KEY, ""), plain.get(DETAIL_KEY, ""), plain.get(VERSIONS_KEY, ""))

    def versions_dict(self) -> dict[str, str]:
        """{"python": ..., "ray": ..., "jax": ..., "podmanager": ...} from the versions line."""
        return dict(part.split("=", 1) for part in self.versions.split() if "=" in part)
