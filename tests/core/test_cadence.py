"""The timings that differ between a dry run and Google Cloud come from one `Cadence` per
mode: the modules take the mode's value, and no `X if simulated else Y` is left in the code."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import time
from pathlib import Path

import pytest

from podmanager.cloud.base import Node, NodeState
from podmanager.cluster import cloud_view
from podmanager.cluster.boot_watch import BootWatch
from podmanager.cluster.cloud_view import CloudView
from podmanager.cluster.cluster_runtime import ClusterRuntime
from podmanager.controller.head import health_checks
from podmanager.core.cadence import GOOGLE_CLOUD, SIMULATED, ApiTiming, Cadence
from podmanager.core.clock import FakeClock
from podmanager.core.spec import parse_spec
from podmanager.state import StateStore

PACKAGE = Path(__file__).resolve().parents[2] / "podmanager"
assert (PACKAGE / "__init__.py").is_file(), PACKAGE  # a walk over no files would prove nothing
SLICES = [{"accelerator": "v4-8"}]


def specs():  # type: ignore[no-untyped-def]
    return {SIMULATED: parse_spec({"name": "c", "backend": "simulated", "slices": SLICES}),
            GOOGLE_CLOUD: parse_spec({"name": "c", "project": "my-project", "zones": ["us-central2-b"],
                                      "slices": SLICES})}


def test_each_mode_has_its_record_and_it_cannot_be_changed() -> None:
    for cadence, spec in specs().items():
        assert Cadence.for_spec(spec) is cadence
    with pytest.raises(dataclasses.FrozenInstanceError):
        SIMULATED.converge_poll_s = 1.0  # type: ignore[misc]


def test_a_dry_run_never_waits_longer_than_google_cloud() -> None:
    def timings(record: object) -> dict[str, float]:
        found: dict[str, float] = {}
        for name, value in dataclasses.asdict(record).items():  # type: ignore[call-overload]
            if isinstance(value, dict):
                found.update({f"{name}.{k}": v for k, v in value.items() if k != "failure_threshold"})
            else:
                found[name] = value
        return found

    fast, slow = timings(SIMULATED), timings(GOOGLE_CLOUD)
    assert fast.keys() == slow.keys()
    assert [name for name in fast if fast[name] > slow[name]] == []


@pytest.mark.parametrize(("timing", "client"), [
    (GOOGLE_CLOUD.tpu_api, "podmanager.cloud.gcp.client:GcpCloud"),
    (GOOGLE_CLOUD.compute_api, "podmanager.cloud.gcp.compute:ComputeClients"),
])
def test_google_clouds_timing_is_the_clients_own_default(timing: ApiTiming, client: str) -> None:
    module, name = client.split(":")
    parameters = inspect.signature(getattr(__import__(module, fromlist=[name]), name)).parameters
    assert {field: parameters[field].default for field in dataclasses.asdict(timing)} == dataclasses.asdict(timing)


def test_the_modules_take_the_modes_value(tmp_path: Path, podmanager_home) -> None:  # type: ignore[no-untyped-def]
    for cadence, spec in specs().items():
        runtime = ClusterRuntime(spec, store=StateStore(tmp_path / "state.db"), cloud=object())  # type: ignore[arg-type]
        assert runtime.provisioner().poll_interval_s == cadence.converge_poll_s
        watch = BootWatch(object(), [], lambda *a, **k: None, FakeClock(), simulated=spec.simulated)  # type: ignore[arg-type]
        assert watch.interval_s == cadence.boot_poll_s
        assert health_checks(spec) == cadence.ray_health.system_config()


def test_status_trusts_the_monitors_view_for_a_few_of_the_modes_periods(podmanager_home) -> None:  # type: ignore[no-untyped-def]
    now = time.time()
    node = Node(name="n", zone="z", accelerator_type="v4-8", state=NodeState.READY, labels={})
    # Five simulated periods old: stale on a dry run, fresh on Google Cloud (its period is longer).
    cloud_view.write("viewed", CloudView(now - 5 * SIMULATED.cloud_view_period_s, [node]))
    assert cloud_view.read_fresh("viewed", simulated=True, newer_than=None, now=now) is None
    assert cloud_view.read_fresh("viewed", simulated=False, newer_than=None, now=now) is not None


def test_no_timing_is_chosen_by_mode_outside_the_cadence() -> None:
    """`0.05 if spec.simulated else 5.0` is what `Cadence` replaced; a new one goes there."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.IfExp) and "simulated" in ast.unparse(node.test)
                    and any(isinstance(side, ast.Constant) and isinstance(side.value, (int, float))
                            and not isinstance(side.value, bool) for side in (node.body, node.orelse))):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {ast.unparse(node)}")
    assert found == []
