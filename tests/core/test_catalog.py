import pytest

from podmanager.core.catalog import CATALOG, all_accelerators, lookup, suggest


@pytest.mark.parametrize(
    "name, chips, hosts, per_host, topology",
    [
        ("v2-8", 4, 1, 4, "2x2"),
        ("v2-32", 16, 4, 4, "4x4"),
        ("v3-8", 4, 1, 4, "2x2"),
        ("v3-2048", 1024, 256, 4, "32x32"),
        ("v4-8", 4, 1, 4, "2x2x1"),
        ("v4-16", 8, 2, 4, "2x2x2"),
        ("v4-4096", 2048, 512, 4, "8x16x16"),
        ("v5p-8", 4, 1, 4, "2x2x1"),
        ("v5p-128", 64, 16, 4, "4x4x4"),
        ("v5litepod-1", 1, 1, 1, "1x1"),
        ("v5litepod-4", 4, 1, 4, "2x2"),
        ("v5litepod-8", 8, 1, 8, "2x4"),
        ("v5litepod-16", 16, 4, 4, "4x4"),
        ("v5litepod-256", 256, 64, 4, "16x16"),
        ("v6e-8", 8, 1, 8, "2x4"),
        ("v6e-16", 16, 4, 4, "4x4"),
        ("v6e-256", 256, 64, 4, "16x16"),
    ],
)
def test_shapes(name, chips, hosts, per_host, topology):
    accelerator = lookup(name)
    assert (accelerator.chips, accelerator.hosts, accelerator.chips_per_host, accelerator.topology) == (
        chips, hosts, per_host, topology)


def test_every_type_is_consistent():
    generations = {a.generation for a in all_accelerators()}
    assert generations == {"v2", "v3", "v4", "v5p", "v5litepod", "v6e"}
    for accelerator in CATALOG.values():
        assert accelerator.hosts * accelerator.chips_per_host == accelerator.chips
        dims = [int(d) for d in accelerator.topology.split("x")]
        product = 1
        for d in dims:
            product *= d
        assert product == accelerator.chips
        suffix = int(accelerator.name.rsplit("-", 1)[1])
        counts_cores = accelerator.generation in ("v2", "v3", "v4", "v5p")
        assert suffix == (accelerator.chips * 2 if counts_cores else accelerator.chips)


def test_unknown_type_suggests_nearest():
    with pytest.raises(KeyError, match="v4-16"):
        lookup("v4-12")
    assert suggest("v5e-8") == "v5litepod-8"
    assert suggest("v6e-9") == "v6e-8"


@pytest.mark.parametrize(("generation", "runtime"), [
    ("v2", "tpu-ubuntu2204-base"), ("v3", "tpu-ubuntu2204-base"), ("v4", "tpu-ubuntu2204-base"),
    ("v5p", "v2-alpha-tpuv5"), ("v5litepod", "v2-alpha-tpuv5-lite"), ("v6e", "v2-alpha-tpuv6e"),
])
def test_every_type_carries_its_generations_runtime_version(generation, runtime):
    of_generation = [a for a in all_accelerators() if a.generation == generation]
    assert of_generation and {a.runtime_version for a in of_generation} == {runtime}
    assert of_generation[0].as_dict()["runtime_version"] == runtime
