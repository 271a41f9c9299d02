"""Host-level hack, kept in one place: a Ray cluster bound to 127.0.0.1 only.

Why it exists: Ray on Linux rewrites "127.0.0.1"/"localhost" to the machine's
outward IP (`ray._private.services.resolve_ip_for_localhost`) for `--node-ip-address`
and for every `--address`/`ray.init(address=...)`. A dry-run cluster would then listen
on every interface. Podmanager instead
  * starts the simulated head with `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` (Ray then
    takes the loopback IP as the node IP and binds GCS, raylet and agents to it), and
  * joins hosts and connects drivers with the address used as given (`as_given()`).
Real (gcp) clusters never go through this module.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from podmanager.core.local_ports import is_loopback

HEAD_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


@contextlib.contextmanager
def as_given(address: str) -> Iterator[None]:
    """Inside the block Ray connects to a loopback `address` without rewriting it."""
    if not is_loopback(address):
        yield
        return
    from ray._private import services

    original = services.resolve_ip_for_localhost
    services.resolve_ip_for_localhost = lambda host: host
    try:
        yield
    finally:
        services.resolve_ip_for_localhost = original
