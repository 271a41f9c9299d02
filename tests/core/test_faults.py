"""One simulator fault type: the spec, `podmanager sim` and the emulator read the same text
as the same fault, with the same defaults, and leave the simulator in the same state."""

from __future__ import annotations

import pytest
from sim_view import sim_control
from typer.testing import CliRunner

from podmanager.api import Cluster, simulation
from podmanager.cli import app
from podmanager.cluster.hangs import arm_hangs
from podmanager.core import faults
from podmanager.core.clock import FakeClock
from podmanager.core.errors import SpecError
from podmanager.core.fault_text import DEFAULT_QUOTA
from podmanager.core.faults import (
    ClearFault,
    CreateFault,
    DegradeFault,
    HangFault,
    MaintenanceFault,
    PreemptFault,
    QuotaFault,
    SecretDeniedFault,
    TransientFault,
)
from podmanager.core.spec import parse_spec
from podmanager.emulator.control import apply_fault
from podmanager.emulator.sim.cloud import SimCloud
from podmanager.emulator.tpu_api import TpuEmulator

SPEC = {"name": "c", "backend": "simulated", "zones": ["zone-a", "zone-b"],
        "slices": [{"accelerator": "v4-8", "count": 2}]}

# (text, the spec's mapping, the fault both are, every default spelled out)
FORMS = [
    ("capacity:zone-a", {"kind": "capacity", "zone": "zone-a"}, CreateFault(kind="capacity", zone="zone-a", times=1)),
    ("reservation:zone-b:3", {"kind": "reservation", "zone": "zone-b", "times": 3},
     CreateFault(kind="reservation", zone="zone-b", times=3)),
    ("preempt-while-creating:zone-a:-1", {"kind": "preempt-while-creating", "zone": "zone-a", "times": -1},
     CreateFault(kind="preempt-while-creating", zone="zone-a", times=-1)),
    ("invalid-request:zone-a", {"kind": "invalid-request", "zone": "zone-a"},
     CreateFault(kind="invalid-request", zone="zone-a", times=1)),
    ("quota", {"kind": "quota"}, QuotaFault(kind="quota", quota=DEFAULT_QUOTA, times=1)),
    ("quota:TPUV5sLitepodPerZone:2", {"kind": "quota", "quota": "TPUV5sLitepodPerZone", "times": 2},
     QuotaFault(kind="quota", quota="TPUV5sLitepodPerZone", times=2)),
    ("transient", {"kind": "transient"}, TransientFault(kind="transient", times=1)),
    ("secret-denied:6", {"kind": "secret-denied", "times": 6}, SecretDeniedFault(kind="secret-denied", times=6)),
    ("clear", {"kind": "clear"}, ClearFault(kind="clear")),
    ("preempt:1:30s:10", {"kind": "preempt", "slice": 1, "after_s": 30, "notice_s": 10},
     PreemptFault(kind="preempt", slice=1, after_s=30.0, notice_s=10.0)),
    ("hang:1", {"kind": "hang", "slice": 1}, HangFault(kind="hang", slice=1, worker=0, after_s=0.0)),
    ("degrade:0::10s", {"kind": "degrade", "slice": 0, "after_s": 10},  # an empty part: the default health
     DegradeFault(kind="degrade", slice=0, health="TIMEOUT", after_s=10.0, for_s=0.0)),
    ("degrade:1:unhealthy_maintenance:30s:1m",
     {"kind": "degrade", "slice": 1, "health": "UNHEALTHY_MAINTENANCE", "after_s": 30, "for_s": 60},
     DegradeFault(kind="degrade", slice=1, health="UNHEALTHY_MAINTENANCE", after_s=30.0, for_s=60.0)),
    ("maintenance:0:5", {"kind": "maintenance", "slice": 0, "after_s": 5},
     MaintenanceFault(kind="maintenance", slice=0, after_s=5.0, notice_s=0.0, duration_s=60.0)),
    ("maintenance:1:1m:10m:2m", {"kind": "maintenance", "slice": 1, "after_s": 60, "notice_s": 600, "duration_s": 120},
     MaintenanceFault(kind="maintenance", slice=1, after_s=60.0, notice_s=600.0, duration_s=120.0)),
]
CLOUD_FORMS = [form for form in FORMS if form[2].kind != "hang"]


def with_faults(*written: object) -> dict:
    return {**SPEC, "simulation": {"boot_hosts": False, "faults": list(written)}}


@pytest.mark.parametrize("text, mapping, fault", FORMS, ids=[f[0] for f in FORMS])
def test_the_spec_and_the_text_are_one_fault_with_one_set_of_defaults(text, mapping, fault):
    spec = parse_spec(with_faults(mapping, text))
    assert spec.simulation.faults == [fault, fault]  # a YAML mapping, or the text in the list
    assert faults.parse(text, flag="FAULT") == fault  # `podmanager sim inject`, `podmanager emulator --fault`
    assert faults.parse(fault.text()) == fault
    stored = parse_spec(spec.model_dump(mode="json"), source="stored spec")  # as `up` stores it
    assert stored.simulation.faults == [fault, fault]


@pytest.mark.parametrize("text, mapping, fault", CLOUD_FORMS, ids=[f[0] for f in CLOUD_FORMS])
def test_scripted_and_control_service_faults_leave_the_same_simulator_state(text, mapping, fault):
    clock = FakeClock()
    scripted, controlled = SimCloud(clock=clock), SimCloud(clock=clock)
    for sim in (scripted, controlled):
        sim.inject_create_fault("zone-b", "capacity", 7)  # something for a `clear` to clear
    before = controlled.pending_faults()
    simulation.arm_scripted_faults(Cluster.from_dict(with_faults(mapping), simulator=scripted, clock=clock).runtime)
    TpuEmulator(controlled).control("fault", spec=text, cluster="c")
    assert scripted.pending_faults() == controlled.pending_faults() != before


def test_the_sim_commands_take_the_same_defaults(tmp_path):
    runner = CliRunner()
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text("name: clitest\nzones: [zone-a, zone-b]\nslices: [{accelerator: v4-8}]\n"
                         "simulation: {create_latency_s: 0.01, delete_latency_s: 0.01, boot_hosts: false}\n")

    def invoke(*args: str) -> str:
        result = runner.invoke(app, list(args), prog_name="podmanager")
        assert result.exit_code == 0, result.output
        return result.output

    def pending():
        return sim_control().pending_faults()

    def controlled(*texts: str):
        sim = SimCloud(clock=FakeClock())
        for text in texts:
            TpuEmulator(sim).control("fault", spec=text)
        return sim.pending_faults()

    invoke("up", "-f", str(spec_file), "--dry-run")
    try:
        said = invoke("sim", "fail-create", "-c", "clitest")  # its flags' defaults: the spec's first zone, once
        assert "the next 1 create(s) in zone-a fail with capacity" in said
        assert pending() == controlled("capacity:zone-a")
        invoke("sim", "fail-create", "-c", "clitest", "--kind", "quota")
        assert pending() == controlled("capacity:zone-a", "quota")
        invoke("sim", "inject", "-c", "clitest", "clear", "reservation:zone-b", "transient")
        assert pending() == controlled("reservation:zone-b", "transient")
        invoke("sim", "fail-create", "-c", "clitest", "--kind", "reservation", "--zone", "zone-b", "--times", "-1")
        assert pending() == controlled("reservation:zone-b:-1", "transient")
        said = invoke("sim", "inject", "-c", "clitest", "degrade:0:unhealthy_maintenance:1m")
        assert "slice 0 turns UNHEALTHY_MAINTENANCE 60s from now until it is replaced" in said
        [degrade] = pending().degrades
        assert (degrade.cluster, degrade.slice, degrade.health, degrade.for_s) == (
            "clitest", 0, "UNHEALTHY_MAINTENANCE", None)
        invoke("sim", "inject", "-c", "clitest", "clear")
        assert pending() == controlled()
    finally:
        invoke("down", "-c", "clitest")


@pytest.mark.parametrize("written, expected", [
    ({"kind": "preempt"}, "simulation.faults[0]: a 'preempt' fault needs 'slice' (the slice index, e.g. 0)"),
    ({"kind": "capacity"}, "simulation.faults[0]: a 'capacity' fault needs 'zone' (the zone whose creates fail"),
    ({"kind": "meteor"}, "simulation.faults[0].kind: 'meteor' is not a fault kind; use one of capacity,"),
    ({"zone": "z"}, "simulation.faults[0].kind: required field is missing; use one of"),
    ({"kind": "preempt", "slice": 0, "aftr_s": 3}, "simulation.faults[0].aftr_s: a 'preempt' fault has no "
                                                   "'aftr_s'; did you mean after_s?"),
    ({"kind": "quota", "zone": "z"}, "simulation.faults[0].zone: a 'quota' fault has no 'zone'; its fields are"),
    ({"kind": "capacity", "zone": "z", "times": 0}, "simulation.faults[0].times: 0 is not a count; use 1 or more, "
                                                    "or -1 to fail every create until cleared"),
    ({"kind": "transient", "times": -1}, "simulation.faults[0].times: -1 is not a count; use 1 or more (-1, "
                                         "until cleared, is for capacity"),
    ({"kind": "preempt", "slice": 0, "after_s": "soon"}, "simulation.faults[0].after_s: 'soon' is not a duration"),
    ("flood:z", "simulation.faults[0]: 'flood' is not a fault kind; use one of"),
])
def test_a_bad_fault_in_the_spec_names_the_field_and_the_fix(written, expected):
    with pytest.raises(SpecError) as raised:
        parse_spec(with_faults(written))
    assert expected in str(raised.value)
    assert raised.value.exit_code == 2


@pytest.mark.parametrize("text, expected, form", [
    ("capacity", "--fault: 'capacity': a 'capacity' fault needs 'zone'", "Write it as capacity:ZONE[:TIMES]."),
    ("capacity:z:x", "--fault: 'capacity:z:x': times: Input should be a valid integer", "capacity:ZONE[:TIMES]"),
    ("quota:a:b:c", "--fault: 'quota:a:b:c': too many ':' parts for a 'quota' fault", "quota[:QUOTA[:TIMES]]"),
    ("clear:z", "too many ':' parts for a 'clear' fault", "Write it as clear."),
    ("flood:z", "--fault: 'flood:z': 'flood' is not a fault kind", "Faults: capacity:ZONE[:TIMES] |"),
    ("preempt:0:x", "after_s: 'x' is not a duration", "preempt:SLICE[:AFTER_S[:NOTICE_S]]"),
    ("degrade:0:SLOW", "health: Input should be 'TIMEOUT' or 'UNHEALTHY_MAINTENANCE'",
     "degrade:SLICE[:HEALTH[:AFTER_S[:FOR_S]]]"),
])
def test_bad_fault_text_names_the_flag_and_the_form(text, expected, form):
    with pytest.raises(SpecError) as raised:
        faults.parse(text, flag="--fault")
    assert expected in raised.value.message
    assert form in (raised.value.hint or "")
    assert raised.value.exit_code == 2


def test_what_needs_a_cluster_or_hosts_is_refused_on_the_bare_cloud():
    sim = SimCloud(clock=FakeClock())
    with pytest.raises(SpecError, match="names a slice of a cluster, and no cluster is given"):
        apply_fault(sim, "preempt:0")
    with pytest.raises(SpecError, match="a degrade names a slice of a cluster, and no cluster is given"):
        apply_fault(sim, "degrade:0")
    with pytest.raises(SpecError, match="a hang freezes a program on a host"):
        apply_fault(sim, "hang:0", cluster="c")
    assert sim.pending_faults() == SimCloud(clock=FakeClock()).pending_faults()


def test_a_spec_stored_by_an_earlier_version_still_loads():
    """Earlier versions stored every fault with every field, the unused ones empty."""
    old = {"kind": "capacity", "slice": None, "zone": "zone-a", "after_s": 0.0, "notice_s": 0.0, "times": 2}
    old_preempt = {"kind": "preempt", "slice": 0, "zone": None, "after_s": 5.0, "notice_s": 0.0, "times": 1}
    spec = parse_spec(with_faults(old, old_preempt), source="stored spec of c")
    assert spec.simulation.faults == [CreateFault(kind="capacity", zone="zone-a", times=2),
                                      PreemptFault(kind="preempt", slice=0, after_s=5.0)]


def test_the_cli_rejects_bad_fault_text_with_exit_code_2():
    result = CliRunner().invoke(app, ["sim", "inject", "-c", "nope", "capacity:z", "flood:z"], prog_name="podmanager")
    assert result.exit_code == 2
    assert "FAULT: 'flood:z': 'flood' is not a fault kind" in result.output
    result = CliRunner().invoke(app, ["emulator", "--port", "0", "--fault", "capacity"], prog_name="podmanager")
    assert result.exit_code == 2
    assert "--fault: 'capacity': a 'capacity' fault needs 'zone'" in result.output


def test_scripted_hangs_wait_for_a_run_and_freeze_the_host_they_name(clock):
    sim = SimCloud(clock=clock)
    two_hosts_each = {**with_faults("hang:1:1:60", {"kind": "hang", "slice": 0, "after_s": "2m"}),
                      "slices": [{"accelerator": "v4-16", "count": 2}]}  # host 1/1 exists
    cluster = Cluster.from_dict(two_hosts_each, simulator=sim, clock=clock)
    simulation.arm_scripted_faults(cluster.runtime)  # at `up`: nothing reaches the cloud
    assert sim.pending_faults() == SimCloud(clock=clock).pending_faults()
    assert [e.message for e in cluster.events() if e.kind == "fault_armed"] == [
        "simulated fault armed: hang:1:1:60 (the program on host 1/1 freezes 60s into the run)",
        "simulated fault armed: hang:0:0:120 (the program on host 0/0 freezes 120s into the run)"]
    timers = arm_hangs(cluster.runtime)  # at a run's start
    try:
        assert [(t.interval, t.args[1:]) for t in timers] == [(60.0, (1, 1)), (120.0, (0, 0))]
    finally:
        for timer in timers:
            timer.cancel()


def test_the_emulators_help_shows_every_fault_form_whole():
    from podmanager.core.fault_text import TEXT_FORMS

    shown = CliRunner().invoke(app, ["emulator", "-h"], terminal_width=80)
    assert shown.exit_code == 0
    for form in TEXT_FORMS.values():  # each whole, in the one list of them
        assert form in shown.output.split("Faults (--fault):")[1], form
