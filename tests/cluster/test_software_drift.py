"""`up` replaces a READY slice whose hosts run other software than a boot now would install
(`cluster/software_drift.py`), judged by the versions each host reported."""

from __future__ import annotations

from podmanager.cluster.software_drift import software_drift
from podmanager.controller.software import (
    content_version,
    controller_versions,
)
from podmanager.controller.staging import wanted_versions
from podmanager.core.records import Versions
from podmanager.core.spec import parse_spec
from podmanager.vm.boot_status import BootStatus

WANTED = Versions("3.11.7", "2.60.0", "0.10.2", "0.1.0+hbbbb")


def booted(podmanager: str) -> BootStatus:
    return BootStatus("joined", "", f"python=3.11.7 ray=2.60.0 jax=0.10.2 podmanager={podmanager}")


def test_a_slice_is_drifted_by_its_first_host_that_runs_other_software() -> None:
    boots = {0: {0: booted("0.1.0+hbbbb"), 1: booted("0.1.0+hbbbb")},
             1: {0: booted("0.1.0+hbbbb"), 1: booted("0.1.0+haaaa")},
             2: {0: BootStatus("installing")},  # said nothing of its versions yet: not judged
             3: {}}
    assert software_drift(boots, WANTED) == {1: "worker 1 runs podmanager 0.1.0+haaaa -> 0.1.0+hbbbb"}


def test_what_a_vm_booted_now_would_run_is_known_without_building_anything() -> None:
    running = controller_versions()
    simulated = {"name": "d", "backend": "simulated", "slices": [{"accelerator": "v4-8"}]}
    assert wanted_versions(parse_spec(simulated)) == running
    assert running.podmanager == content_version()
    pinned = parse_spec({**simulated, "boot": {"podmanager": "0.2.0"}})
    assert wanted_versions(pinned) == Versions(running.python, running.ray, running.jax, "0.2.0")
    wheel = parse_spec({**simulated, "boot": {"podmanager": "gs://b/w/podmanager-0.3.0+hcccc-py3-none-any.whl"}})
    assert wanted_versions(wheel).podmanager == "0.3.0+hcccc"
