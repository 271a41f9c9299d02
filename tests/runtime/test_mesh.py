"""runtime/mesh.py: the parallelism a program asks for, its mesh and device grid (single process; JAX on CPU)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from podmanager import runtime

pytestmark = pytest.mark.usefixtures("clean_runtime")  # tests/runtime/conftest.py


def _run_python(code: str, *, env_extra: dict[str, str] | None = None, timeout: float = 60):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", **(env_extra or {})}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=timeout)


# ------------------------------------------------------------ parse_parallelism


@pytest.mark.parametrize(("text", "n", "want"), [
    ("data", 8, {"data": 8, "model": 1}),
    ("model", 8, {"data": 1, "model": 8}),
    ("data=2,model=4", 8, {"data": 2, "model": 4}),
    (" model=4 , data=2 ", 8, {"data": 2, "model": 4}),
    ("data=2,model", 8, {"data": 2, "model": 4}),
    ("data=*,model=2", 8, {"data": 4, "model": 2}),
    ("model=-1,data=4", 8, {"data": 4, "model": 2}),
    ("data=1", 1, {"data": 1, "model": 1}),
    ({"data": 2, "model": 4}, 8, {"data": 2, "model": 4}),
    ({"model": 8}, 8, {"data": 1, "model": 8}),
])
def test_parse_parallelism_accepts(text, n, want):
    assert runtime.parse_parallelism(text, n) == want


@pytest.mark.parametrize(("text", "n", "match"), [
    ("data=2,model=2", 8, r"data=2 x model=2 = 4 devices, but there are 8 devices"),
    ("data=3", 8, r"= 3 devices, but there are 8"),
    ("data=3,model", 8, r"8 devices are not divisible by 3"),
    ("data,model", 8, r"only one axis"),
    ("pipeline=2", 8, r"unknown axis 'pipeline'"),
    ("data=2,data=4", 8, r"given twice"),
    ("data=0,model=8", 8, r"must be positive"),
    ("data=two", 8, r"integer size"),
    ("", 8, r"empty"),
    ({"data": 2.5}, 8, r"must be an int"),
])
def test_parse_parallelism_rejects(text, n, match):
    with pytest.raises(ValueError, match=match):
        runtime.parse_parallelism(text, n)




# ------------------------------------------------------------ mesh


def test_mesh_shape_axes_and_tensor_parallel_matmul():
    r = _run_python("""
        import jax
        jax.config.update("jax_num_cpu_devices", 8)
        from podmanager import runtime
        import jax.numpy as jnp
        from jax.sharding import NamedSharding, PartitionSpec as P
        runtime.initialize()
        for spec in ["data", "model", "data=2,model=4", {"data": 4, "model": 2}]:
            m = runtime.mesh(spec)
            print("MESH", dict(m.shape), [str(t) for t in m.axis_types], m.devices.size)
        m = runtime.mesh("data=2,model=4")
        x = jax.device_put(jnp.ones((4, 16)), NamedSharding(m, P("data", None)))
        w = jax.device_put(jnp.ones((16, 8)), NamedSharding(m, P(None, "model")))
        print("MATMUL", float(jax.jit(lambda x, w: (x @ w).sum())(x, w)))
        try:
            runtime.mesh("data=3")
        except ValueError as e:
            print("ERROR", e)
        """)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [ln for ln in r.stdout.splitlines()]
    meshes = [ln for ln in lines if ln.startswith("MESH")]
    assert meshes == [
        "MESH {'data': 8, 'model': 1} ['AxisType.Auto', 'AxisType.Auto'] 8",
        "MESH {'data': 1, 'model': 8} ['AxisType.Auto', 'AxisType.Auto'] 8",
        "MESH {'data': 2, 'model': 4} ['AxisType.Auto', 'AxisType.Auto'] 8",
        "MESH {'data': 4, 'model': 2} ['AxisType.Auto', 'AxisType.Auto'] 8",
    ]
    assert "MATMUL 512.0" in lines
    assert any(ln.startswith("ERROR") and "there are 8 devices" in ln for ln in lines)


class _FakeDevice:
    def __init__(self, i: int, slice_index: int):
        self.id, self.slice_index, self.process_index = i, slice_index, i // 2
        self.platform = self.device_kind = "cpu"


def test_device_grid_one_slice_keeps_model_axis_within_hosts():
    devs = [_FakeDevice(i, 0) for i in range(8)]
    grid = runtime.device_grid({"data": 4, "model": 2}, devs)
    assert [[d.id for d in row] for row in grid] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    # each "model" group is one host (process)
    assert all(len({d.process_index for d in row}) == 1 for row in grid)


def test_device_grid_multislice_puts_data_across_slices():
    devs = [_FakeDevice(i, i // 4) for i in range(8)]
    grid = runtime.device_grid({"data": 2, "model": 4}, devs)
    assert [{d.slice_index for d in row} for row in grid] == [{0}, {1}]
    with pytest.raises(ValueError, match="2 slices need a 'data' axis that is a multiple of 2"):
        runtime.device_grid({"data": 1, "model": 8}, devs)
