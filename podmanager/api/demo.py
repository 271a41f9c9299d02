"""The dry-run demo: a two-slice spot cluster on the simulated cloud, driven from this machine
as from a laptop: `up` makes the cluster's controller VM (the Ray head, the run's supervisor,
the state) and the slices; the run is shipped to the controller over the channel; a slice is
preempted halfway; the run recovers, finishes, and everything is torn down.

Everything but the cloud is the real thing: the controller and the hosts are simulated VMs
booted by their startup scripts, the hosts are Ray nodes, the chips are CPU devices, and the
recovery is the same code that handles a real preemption.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

from podmanager.channel.cluster_status import ClusterStatus
from podmanager.client.remote import RemoteCluster, down_remote, is_remote, stored_spec
from podmanager.client.remote_up_down import RemoteSpec
from podmanager.core import faults
from podmanager.core.errors import PodmanagerError
from podmanager.core.records import HostSlot
from podmanager.core.run_results import RunResult
from podmanager.core.spec import parse_spec
from podmanager.core.workload import Workload
from podmanager.state import Event, StateStore

# A name no example of the README uses (they call the user's cluster `demo`), so the demo never
# takes over a cluster of the user's: one of this name that the demo did not make is refused.
DEMO_NAME = "podmanager-demo"
DEMO_SPEC = {
    "name": DEMO_NAME,
    "backend": "simulated",
    "controller": {"local": False},
    "slices": [{"accelerator": "v4-8", "count": 2, "capacity": "spot"}],
    "simulation": {"create_latency_s": 0.5, "delete_latency_s": 0.2},
}
STEPS = 300
PREEMPT_AT_STEP = 120


def workloads_dir() -> Path:
    """The example programs: `workloads/` beside the package in a source checkout."""
    folder = Path(__file__).resolve().parents[2] / "workloads"  # podmanager/api/demo.py -> the checkout
    if not (folder / "train_mlp.py").exists():
        raise PodmanagerError("the demo needs the example programs in workloads/; run it from a source checkout "
                              "installed with 'pip install -e .'")
    return folder


class _PreemptHalfway:
    """Watches the training output and preempts slice 1 once, at PREEMPT_AT_STEP."""

    def __init__(self, cluster: RemoteCluster, show: Callable[[HostSlot, str], None]):
        self.cluster = cluster
        self.show = show
        self.done = False

    def __call__(self, slot: HostSlot, text: str) -> None:
        self.show(slot, text)
        if self.done:
            return
        for line in text.splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0] == "step" and parts[1].isdigit() and int(parts[1]) >= PREEMPT_AT_STEP:
                self.done = True
                # From another thread, as the cloud would: the run notices on its own.
                preempt = faults.parse("preempt:1")  # slice 1, now: sent to the controller as `sim preempt` is
                threading.Thread(target=self.cluster.inject, args=(preempt,), daemon=True).start()
                return


class DemoNameTakenError(PodmanagerError):
    exit_code = 2


def refuse_a_cluster_not_the_demos(store: StateStore) -> None:
    """The demo resumes its own cluster (an interrupted demo's, the same spec) and touches no
    other: a cluster of its name with another spec, here or behind a controller VM, is the user's."""
    record = store.get_cluster(DEMO_NAME)
    if record is None and not is_remote(DEMO_NAME):
        return
    try:
        found = stored_spec(DEMO_NAME) if record is None else record.spec
        ours = found == parse_spec(DEMO_SPEC)
    except (PodmanagerError, ValueError):  # ValueError: a pointer's spec that is no JSON
        ours = False
    if not ours:
        raise DemoNameTakenError(
            f"the demo makes a cluster named {DEMO_NAME}, and a cluster of that name exists that the demo did not "
            "make (its spec differs); the demo leaves it alone",
            hint=f"Remove it with 'podmanager down -c {DEMO_NAME}' if it is no longer needed, then run the demo again.")


def run_demo(on_event: Callable[[Event], None], show_output: Callable[[HostSlot, str], None],
             show_status: Callable[[ClusterStatus], None], say: Callable[[str], None] = lambda text: None
             ) -> RunResult:
    """The demo from up to down; `say` hears what each phase is about to wait for."""
    folder = workloads_dir()
    refuse_a_cluster_not_the_demos(StateStore())
    try:
        say("1/3 up: make the controller VM (it runs the Ray head and the run's supervisor), create two v4-8 "
            "slices, and wait for their hosts to join Ray")
        show_status(RemoteSpec(parse_spec(DEMO_SPEC), DEMO_SPEC).up(timeout_s=600, on_event=on_event))
        # The checkout is shipped to the controller as a run's working dir is (it honours .gitignore);
        # the checkpoints go to the controller's own folder for the run, new with each demo's VM.
        workload = Workload(entrypoint="workloads/train_mlp.py", working_dir=str(folder.parent), parallelism="data",
                            args=["--steps", str(STEPS), "--checkpoint-every", "20", "--log-every", "20"])
        say(f"2/3 run: ship this checkout to the controller, train for {STEPS} steps on both slices (JAX starts on "
            f"every host first); slice 1 is preempted at step {PREEMPT_AT_STEP}")
        with RemoteCluster(DEMO_NAME) as cluster:
            return cluster.run(workload, printer=_PreemptHalfway(cluster, show_output), on_event=on_event)
    finally:
        say("3/3 down: delete the slices, the controller VM and its firewall rule")
        down_remote(DEMO_NAME, on_event=on_event, spec=parse_spec(DEMO_SPEC))
