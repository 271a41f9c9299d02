"""The demo says what each phase waits for, in order, around the cluster's own events."""

from __future__ import annotations

from podmanager.api import demo


class RecordingCluster:
    """Stands in for the cluster: records the verbs the demo calls, in order with what it says."""

    name = "demo"

    def __init__(self, log: list[str]):
        self.log = log

    def up(self, timeout_s: float):
        self.log.append("up")
        return "status"

    def run(self, workload, printer):
        self.log.append(f"run {workload.entrypoint}")
        return "result"

    def down(self):
        self.log.append("down")


def test_demo_announces_each_phase_before_it_waits(monkeypatch):
    log: list[str] = []
    monkeypatch.setattr(demo.Cluster, "from_dict", classmethod(lambda cls, data, on_event: RecordingCluster(log)))
    result = demo.run_demo(on_event=lambda event: None, show_output=lambda slot, text: None,
                           show_status=lambda status: log.append("status shown"), say=lambda text: log.append(text))
    assert result == "result"
    assert [entry.split(":")[0] for entry in log] == [
        "1/3 up", "up", "status shown", "2/3 run", "run workloads/train_mlp.py", "3/3 down", "down"]
    assert "step 120" in log[3]


def test_demo_finds_the_example_programs_of_the_checkout():
    assert (demo.workloads_dir() / "train_mlp.py").is_file()
