"""Accelerator catalog: every Cloud TPU VM type with its true shape.

Naming rule: the suffix counts TensorCores for v2, v3, v4 and v5p (two per chip) and
chips for v5litepod (v5e) and v6e. Multi-host slices have 4 chips per host; the
single-host 8-chip shapes v5litepod-8 and v6e-8 are the exception.

Each type also carries the TPU VM software version (`runtime_version`) Google lists for its
generation: the spec's default when a slice names none.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Accelerator:
    name: str  # the Cloud TPU accelerator type, e.g. "v4-16"
    generation: str  # "v4", "v5litepod", ...
    chips: int
    hosts: int
    chips_per_host: int
    topology: str  # "2x2x2"
    cores_per_chip: int
    runtime_version: str  # the TPU VM image Google lists for this generation

    @property
    def tensorcores(self) -> int:
        return self.chips * self.cores_per_chip

    def as_dict(self) -> dict:
        return asdict(self)


# generation -> (TensorCores per chip, whether the suffix counts cores, topologies)
_TOPOLOGIES: dict[str, tuple[int, bool, list[str]]] = {
    "v2": (2, True, ["2x2", "4x4", "4x8", "8x8", "8x16", "16x16"]),
    "v3": (2, True, ["2x2", "4x4", "4x8", "8x8", "8x16", "16x16", "16x32", "32x32"]),
    "v4": (2, True, [
        "2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x8x8",
        "8x8x8", "8x8x12", "8x8x16", "8x16x16",
    ]),
    "v5p": (2, True, [
        "2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x4x12", "4x8x8",
        "4x8x12", "8x8x8", "8x8x12", "8x8x16", "8x16x16", "16x16x12", "16x16x16", "16x16x24",
    ]),
    "v5litepod": (1, False, ["1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16"]),
    "v6e": (1, False, ["1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16"]),
}

# generation -> its TPU VM software version, from Google's table of runtime versions: v4 and
# older boot the plain Ubuntu base image; v5e, v5p and v6e have images of their own.
_RUNTIME_VERSIONS: dict[str, str] = {
    "v2": "tpu-ubuntu2204-base",
    "v3": "tpu-ubuntu2204-base",
    "v4": "tpu-ubuntu2204-base",
    "v5p": "v2-alpha-tpuv5",
    "v5litepod": "v2-alpha-tpuv5-lite",
    "v6e": "v2-alpha-tpuv6e",
}

# Up to this many chips a v5litepod/v6e slice is one host (1x1, 2x2 and 2x4).
_SINGLE_HOST_MAX_CHIPS = 8


def _build() -> dict[str, Accelerator]:
    table: dict[str, Accelerator] = {}
    for generation, (cores_per_chip, suffix_counts_cores, topologies) in _TOPOLOGIES.items():
        for topology in topologies:
            chips = math.prod(int(d) for d in topology.split("x"))
            if suffix_counts_cores:
                hosts = max(1, chips // 4)
            else:
                hosts = 1 if chips <= _SINGLE_HOST_MAX_CHIPS else chips // 4
            suffix = chips * cores_per_chip if suffix_counts_cores else chips
            name = f"{generation}-{suffix}"
            table[name] = Accelerator(
                name=name,
                generation=generation,
                chips=chips,
                hosts=hosts,
                chips_per_host=chips // hosts,
                topology=topology,
                cores_per_chip=cores_per_chip,
                runtime_version=_RUNTIME_VERSIONS[generation],
            )
    return table


CATALOG: dict[str, Accelerator] = _build()

# Names people commonly type for the same generation.
_ALIASES = {"v5e": "v5litepod", "v5lite": "v5litepod"}


def all_accelerators() -> list[Accelerator]:
    order = list(_TOPOLOGIES)
    return sorted(CATALOG.values(), key=lambda a: (order.index(a.generation), a.chips))


def suggest(name: str) -> str | None:
    """The closest known type to a misspelt or impossible one, for error messages."""
    generation, _, suffix = name.partition("-")
    generation = _ALIASES.get(generation, generation)
    same_generation = [a for a in CATALOG.values() if a.generation == generation]
    if same_generation and suffix.isdigit():
        wanted = int(suffix)
        def distance(a: Accelerator) -> tuple[int, int]:
            size = a.tensorcores if _TOPOLOGIES[generation][1] else a.chips
            return (abs(size - wanted), -size)
        return min(same_generation, key=distance).name
    close = difflib.get_close_matches(f"{generation}-{suffix}", CATALOG, n=1)
    return close[0] if close else None


def lookup(name: str) -> Accelerator:
    """The accelerator called `name`; KeyError with a suggestion when there is none."""
    try:
        return CATALOG[name]
    except KeyError:
        hint = suggest(name)
        raise KeyError(f"did you mean {hint}?" if hint else "no similar type") from None
