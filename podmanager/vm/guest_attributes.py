"""The one writer of this VM's guest attributes (`podmanager/KEY` on its metadata server), shared by
every process of the VM: the startup script runs this file's source with the image's `python3`
(`python3 -c CODE KEY VALUE`, before podmanager is installed), the join and the controller's
daemon call `publish` (through `boot_status.py`).

Google takes at most 10 guest-attribute queries a minute per VM, in bursts of at most 3 a second,
and may drop the writes beyond that without an error
(https://cloud.google.com/compute/docs/metadata/manage-guest-attributes). So a write is made
only when the key's value changed since this VM last wrote it, and is held back until it fits
the rate (with a margin: the VM's clock and Google's need not agree). What was written, and
when, is kept in a folder every process of the VM shares, under an exclusive lock, so two
processes writing at once still keep within the one budget.

Standard library only, and Python 3.8's.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
import urllib.error
import urllib.request
from typing import Callable, List

NAMESPACE = "podmanager"
PER_MINUTE, PER_SECOND = 10, 3
MINUTE_S, SECOND_S = 61.0, 1.1  # Google's windows, with a margin


def state_dir() -> str:
    """Where this VM keeps what it wrote and when (a simulated VM's under its own root)."""
    return os.environ.get("PODMANAGER_ROOT", "") + "/run/podmanager/guest-attributes"


def metadata_root() -> str:
    return os.environ.get("PODMANAGER_METADATA_URL") or (
        "http://" + (os.environ.get("GCE_METADATA_IP") or "metadata.google.internal") + "/computeMetadata/v1")


def wait_s(times: List[float], now: float) -> float:
    """How long from `now` until one more write keeps within the rate, after writes at `times`."""
    recent = sorted(t for t in times if t > now - MINUTE_S)
    waits = [0.0]
    if len(recent) >= PER_MINUTE:
        waits.append(recent[-PER_MINUTE] + MINUTE_S - now)
    if len(recent) >= PER_SECOND:
        waits.append(recent[-PER_SECOND] + SECOND_S - now)
    return max(waits)


def put(key: str, value: str) -> bool:
    """One PUT of podmanager/KEY; whether the metadata server took it (it answers 403 when the
    VM's metadata does not turn guest attributes on)."""
    request = urllib.request.Request(
        f"{metadata_root()}/instance/guest-attributes/{NAMESPACE}/{key}", data=value.encode(), method="PUT",
        headers={"Metadata-Flavor": "Google"})
    try:
        urllib.request.urlopen(request, timeout=5.0).close()
    except (OSError, urllib.error.URLError) as error:
        print(f"could not write guest attribute {NAMESPACE}/{key}: {error}", file=sys.stderr)
        return False
    return True


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except FileNotFoundError:
        return None


def publish(key: str, value: str, *, clock: Callable[[], float] = time.time,
            sleep: Callable[[float], None] = time.sleep) -> bool:
    """podmanager/KEY = VALUE, unless this VM wrote that value last; held back to keep within the
    rate. Whether it is there (written now or before)."""
    if not key or "/" in key:
        raise ValueError(f"guest attribute key {key!r} must be one path segment")
    folder = state_dir()
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        lock = open(os.path.join(folder, ".lock"), "a")
    except OSError as error:  # nowhere to keep the budget: write anyway, unpaced
        print(f"guest attributes unpaced ({error})", file=sys.stderr)
        return put(key, value)
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        last = os.path.join(folder, key)
        if _read(last) == value:
            return True
        writes = os.path.join(folder, ".writes")
        times = [float(t) for t in (_read(writes) or "").split()]
        sleep(wait_s(times, clock()))
        if not put(key, value):
            return False
        times = [t for t in times if t > clock() - MINUTE_S] + [clock()]
        for path, text in ((last, value), (writes, "\n".join(f"{t:.3f}" for t in times))):
            with open(path + ".tmp", "w", encoding="utf-8") as file:
                file.write(text)
            os.replace(path + ".tmp", path)
    return True


def main(argv: List[str]) -> int:
    """`KEY VALUE`: publish it (the startup script's `attribute`)."""
    if len(argv) != 2:
        print("usage: guest_attributes KEY VALUE", file=sys.stderr)
        return 2
    return 0 if publish(argv[0], argv[1]) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
