"""A ``jax.sharding.Mesh`` with ("data", "model") axes from a parallelism spec."""

from __future__ import annotations

import math
from collections.abc import Mapping

MESH_AXES = ("data", "model")


def parse_parallelism(text: str | Mapping[str, int], n_devices: int) -> dict[str, int]:
    """Turn a parallelism spec into ``{"data": d, "model": m}`` with ``d*m == n_devices``.

    Accepted forms: ``"data"`` (all devices on data), ``"model"`` (all on
    model), ``"data=2,model=4"``, ``"model=4,data=2"``, ``"data=2,model"``
    (a bare axis, or ``axis=-1``, takes what is left; at most one), or a
    mapping such as ``{"data": 2, "model": 4}``. An axis not named is 1.
    Raises ``ValueError`` with a message naming the counts. Pure.
    """
    if n_devices < 1:
        raise ValueError(f"n_devices must be >= 1, got {n_devices}")
    items: list[tuple[str, int]] = []
    if isinstance(text, Mapping):
        for k, v in text.items():
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"parallelism {dict(text)!r}: size of {k!r} must be an int")
            items.append((str(k).strip(), v))
        shown = ",".join(f"{k}={v}" for k, v in items)
    else:
        shown = text.strip()
        if not shown:
            raise ValueError("parallelism is empty; use e.g. 'data', 'model' or 'data=2,model=4'")
        for part in shown.split(","):
            part = part.strip()
            if "=" in part:
                name, _, raw = part.partition("=")
                raw = raw.strip()
                if raw in ("*", "-1"):
                    size = -1
                else:
                    try:
                        size = int(raw)
                    except ValueError:
                        raise ValueError(
                            f"parallelism {shown!r}: {part!r} needs an integer size"
                        ) from None
                items.append((name.strip(), size))
            else:
                items.append((part, -1))

    sizes: dict[str, int] = {}
    for name, size in items:
        if name not in MESH_AXES:
            raise ValueError(
                f"parallelism {shown!r}: unknown axis {name!r}; axes are {', '.join(MESH_AXES)}"
            )
        if name in sizes:
            raise ValueError(f"parallelism {shown!r}: axis {name!r} given twice")
        if size == 0 or size < -1:
            raise ValueError(f"parallelism {shown!r}: size of {name!r} must be positive")
        sizes[name] = size

    inferred = [n for n, s in sizes.items() if s == -1]
    if len(inferred) > 1:
        raise ValueError(f"parallelism {shown!r}: only one axis may take the remaining devices")
    fixed = math.prod(s for s in sizes.values() if s != -1)
    if inferred:
        if n_devices % fixed:
            raise ValueError(
                f"parallelism {shown!r}: {n_devices} devices are not divisible by {fixed}"
            )
        sizes[inferred[0]] = n_devices // fixed
    out = {axis: sizes.get(axis, 1) for axis in MESH_AXES}
    product = math.prod(out.values())
    if product != n_devices:
        raise ValueError(
            f"parallelism {shown!r} is data={out['data']} x model={out['model']} = {product} "
            f"devices, but there are {n_devices} devices"
        )
    return out


def device_grid(shape: Mapping[str, int], devices):
    """Arrange ``devices`` into a ("data", "model") array for a Mesh.

    One slice: ``mesh_utils.create_device_mesh`` (topology-aware on TPU; on
    CPU the global order, so "model" varies fastest and stays within a host
    and "data" spans hosts). Several slices (multislice TPU, devices with
    distinct ``slice_index``): a hybrid mesh whose "data" axis spans the
    slices over DCN and "model" stays inside a slice over ICI, so "data"
    must be a multiple of the slice count.
    """
    import numpy as np
    from jax.experimental import mesh_utils

    sizes = tuple(shape[a] for a in MESH_AXES)
    slices = sorted({getattr(d, "slice_index", 0) or 0 for d in devices})
    if len(slices) <= 1:
        return mesh_utils.create_device_mesh(sizes, devices)
    n = len(slices)
    if shape["data"] % n:
        raise ValueError(
            f"{n} slices need a 'data' axis that is a multiple of {n} "
            f"(model parallelism stays inside a slice), got data={shape['data']}"
        )
    per_slice = (shape["data"] // n, shape["model"])
    grid = mesh_utils.create_hybrid_device_mesh(per_slice, (n, 1), devices)
    return np.asarray(grid)


def mesh(parallelism: str | Mapping[str, int] = "data"):
    """A ``jax.sharding.Mesh`` with axes ("data", "model") over all global devices.

    Axis types are Auto, so XLA propagates shardings and tensor-parallel
    matmuls work (``jax.make_mesh`` would default to Explicit). Device order:
    see ``device_grid``. Raises ``ValueError`` when the shape does not fit.
    """
    import jax
    from jax.sharding import AxisType, Mesh

    devices = jax.devices()
    shape = parse_parallelism(parallelism, len(devices))
    return Mesh(
        device_grid(shape, devices),
        MESH_AXES,
        axis_types=(AxisType.Auto,) * len(MESH_AXES),
    )
