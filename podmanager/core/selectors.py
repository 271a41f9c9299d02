"""Slices and hosts named as the user sees them, in every flag that takes one.

A slice is its index (`0`), `slice-0` (as logs and events print it) or its node name
(`demo-s0`, as the cloud console lists it). A host is a slice, `/`, and a worker id
(`0/1`, `slice-0/1`, `slice-0/host-1`, `demo-s0/1`). Errors name the flag and the forms.
"""

from __future__ import annotations

import re

from podmanager.core.errors import SpecError

_SLICE = r"(?:slice-(?P<index>\d+)|(?P<node>[a-z][a-z0-9-]*)-s(?P<node_index>\d+)|(?P<bare>\d+))"
_SLICE_FORMS = "0, slice-0 or the node name {cluster}-s0"


def parse_slice(text: str, cluster: str, *, flag: str) -> int:
    """One slice of `cluster` -> its index."""
    match = re.fullmatch(_SLICE, text.strip())
    if not match:
        raise SpecError(f"{flag}: {text!r} is not a slice; use {_SLICE_FORMS.format(cluster=cluster)}")
    return _index(match, cluster, flag)


def parse_slices(text: str, cluster: str, *, flag: str) -> list[int]:
    """A comma list of slices -> their indexes, in order, without repeats."""
    indexes: list[int] = []
    for item in text.split(","):
        index = parse_slice(item, cluster, flag=flag)
        if index not in indexes:
            indexes.append(index)
    return indexes


def parse_host(text: str, cluster: str, *, flag: str) -> tuple[int, int]:
    """One host of `cluster` -> (slice index, worker id)."""
    match = re.fullmatch(_SLICE + r"/(?:host-)?(?P<worker>\d+)", text.strip())
    if not match:
        raise SpecError(f"{flag}: {text!r} is not a host; use SLICE/WORKER, e.g. 0/1, slice-0/1, "
                        f"slice-0/host-1 or {cluster}-s0/1")
    return _index(match, cluster, flag), int(match.group("worker"))


def _index(match: re.Match[str], cluster: str, flag: str) -> int:
    if match.group("node") is not None and match.group("node") != cluster:
        raise SpecError(f"{flag}: {match.group('node')}-s{match.group('node_index')} is not a node of cluster "
                        f"{cluster}; its nodes are {cluster}-s0, {cluster}-s1, ...")
    return int(match.group("index") or match.group("node_index") or match.group("bare"))
