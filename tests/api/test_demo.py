"""The demo says what each phase waits for, in order, around the cluster's own events."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from podmanager.api import demo
from podmanager.client import pinned
from podmanager.core.spec import parse_spec
from podmanager.state import StateStore


class RecordingCluster:
    """Stands in for the cluster: records the verbs the demo calls, in order with what it says."""

    name = demo.DEMO_NAME

    def __init__(self, log: list[str]):
        self.log = log

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        pass

    def run(self, workload, printer, on_event):
        self.log.append(f"run {workload.entrypoint} from {Path(workload.working_dir).name}")
        return "result"


def record_the_demo(monkeypatch, log: list[str]) -> None:
    """The demo's verbs on a controller VM, recorded instead of done."""

    class RecordingSpec:
        def __init__(self, spec, raw):
            assert spec.controller.local is False and raw is demo.DEMO_SPEC  # the demo rehearses the split

        def up(self, timeout_s, on_event):
            log.append("up")
            return "status"

    monkeypatch.setattr(demo, "RemoteSpec", RecordingSpec)
    monkeypatch.setattr(demo, "RemoteCluster", lambda name: RecordingCluster(log))
    monkeypatch.setattr(demo, "down_remote", lambda name, on_event, spec: log.append("down"))


def test_demo_announces_each_phase_before_it_waits(monkeypatch):
    log: list[str] = []
    record_the_demo(monkeypatch, log)
    result = demo.run_demo(on_event=lambda event: None, show_output=lambda slot, text: None,
                           show_status=lambda status: log.append("status shown"), say=lambda text: log.append(text))
    assert result == "result"
    checkout = demo.workloads_dir().parent.name
    assert [entry.split(":")[0] for entry in log] == [
        "1/3 up", "up", "status shown", "2/3 run", f"run workloads/train_mlp.py from {checkout}", "3/3 down", "down"]
    assert "step 120" in log[3] and "controller VM" in log[0]


def test_demo_finds_the_example_programs_of_the_checkout():
    assert (demo.workloads_dir() / "train_mlp.py").is_file()


def test_the_demo_has_a_name_no_example_gives_a_cluster():
    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    examples = [parse_spec_name.group(1) for path in (root / "infra" / "examples").glob("*.yaml")
                if (parse_spec_name := re.search(r"^name: (\S+)", path.read_text(), re.MULTILINE))]
    used = set(re.findall(r"(?:-c|--cluster) ([a-z][-a-z0-9]*)", readme)) | set(examples)
    assert "demo" in used and demo.DEMO_NAME not in used


def test_the_demo_refuses_a_cluster_of_its_name_it_did_not_make(monkeypatch):
    log: list[str] = []
    record_the_demo(monkeypatch, log)
    users = parse_spec({"name": demo.DEMO_NAME, "project": "my-gcp-project", "slices": [{"accelerator": "v4-16"}]},
                       dry_run=True)
    StateStore().save_cluster(demo.DEMO_NAME, users, "up")
    with pytest.raises(demo.DemoNameTakenError, match=f"a cluster named {demo.DEMO_NAME}.* that the demo did not make") as refused:
        demo.run_demo(on_event=lambda event: None, show_output=lambda slot, text: None, show_status=lambda status: None)
    assert refused.value.exit_code == 2 and log == []  # nothing made, so nothing of the user's is taken down
    assert StateStore().get_cluster(demo.DEMO_NAME).spec == users


def test_the_demo_refuses_a_controller_vm_cluster_of_its_name_with_another_spec(monkeypatch):
    log: list[str] = []
    record_the_demo(monkeypatch, log)
    pinned.save_spec(demo.DEMO_NAME, json.dumps({**demo.DEMO_SPEC, "slices": [{"accelerator": "v4-16"}]}))
    with pytest.raises(demo.DemoNameTakenError):
        demo.run_demo(on_event=lambda event: None, show_output=lambda slot, text: None, show_status=lambda status: None)
    assert log == []


def test_the_demo_resumes_its_own_interrupted_cluster(monkeypatch):
    log: list[str] = []
    record_the_demo(monkeypatch, log)
    pinned.save_spec(demo.DEMO_NAME, json.dumps(demo.DEMO_SPEC))  # an interrupted demo's pointer
    demo.run_demo(on_event=lambda event: None, show_output=lambda slot, text: None, show_status=lambda status: None)
    assert [entry.split(" ")[0] for entry in log] == ["up", "run", "down"]


def test_the_demo_preempts_slice_1_once_through_the_clusters_own_fault_verb():
    # The demo's cluster is a controller VM's: the preemption goes to it as `sim preempt` does
    # (ClusterClient.inject), never through a runtime of this machine's (the demo broke so once).
    import threading

    from podmanager.core.faults import PreemptFault
    from podmanager.core.records import HostSlot

    injected, shown, called = [], [], threading.Event()

    class Injecting:
        def inject(self, fault):
            injected.append(fault)
            called.set()
            return "preempted"

    preempter = demo._PreemptHalfway(Injecting(), lambda slot, text: shown.append(text))
    slot = HostSlot(slice_index=0, worker_id=0, node_name="podmanager-demo-s0", ip="127.0.0.1", chips=4,
                    accelerator="v4-8")
    preempter(slot, f"step {demo.PREEMPT_AT_STEP - 1} loss 1.0\n")
    assert injected == [] and not called.is_set()
    preempter(slot, f"step {demo.PREEMPT_AT_STEP} loss 0.9\nstep {demo.PREEMPT_AT_STEP + 1} loss 0.8\n")
    assert called.wait(timeout=30)
    preempter(slot, f"step {demo.PREEMPT_AT_STEP + 2} loss 0.7\n")
    [fault] = injected
    assert isinstance(fault, PreemptFault) and fault.slice == 1 and not fault.notice_s
    assert len(shown) == 3  # every output is shown, the preemption's too
