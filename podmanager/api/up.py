"""`up`'s work under the cluster's lock: plan, refuse (or with --force cancel) the runs in the
way, keep the hot spares, converge, and on a failure say what is left running (or delete it)."""

from __future__ import annotations

from typing import Callable

from podmanager.api import simulation
from podmanager.api.cancel import cancel_run
from podmanager.api.resume import restart_lost_supervisors
from podmanager.api.up_failure import left_running
from podmanager.api.up_plan import UpPlan, in_the_way, runs_in_the_way
from podmanager.cluster.cluster_runtime import ClusterRuntime
from podmanager.cluster.controller_place import check_local_controller
from podmanager.cluster.preflight import check_before_up
from podmanager.core import spares
from podmanager.core.errors import PodmanagerError, SpecError
from podmanager.provisioning.slice_layout import retire_idle
from podmanager.state.run_records import RunStore


class FirstUpFailed(Exception):
    """A cluster's first `up` failed and is to be deleted whole (`delete_on_failure`)."""

    def __init__(self, error: PodmanagerError):
        super().__init__(str(error))
        self.error = error


def plan_up(runtime: ClusterRuntime) -> UpPlan:
    """What `up` of the runtime's spec would do to the cloud now (nothing is changed)."""
    return UpPlan(runtime.name, runtime.plan_changes(), spares.describe_cost(runtime.spec))


def bring_up(runtime: ClusterRuntime, runs: RunStore, *, timeout_s: float, force: bool,
             on_plan: Callable[[UpPlan], None] | None, delete_on_failure: bool) -> None:
    """`Cluster.up` up to its status. Raises FirstUpFailed when a first `up` failed with
    `delete_on_failure` (the caller runs `down`, which takes the lock this holds)."""
    if runtime.hosts:
        runtime.hosts.check()  # a boot: the VMs could not boot with costs nothing
    runtime.cloud  # opens the backend first: bad credentials fail before anything is recorded or created
    if runtime.backend_from_spec:
        check_local_controller(runtime.spec)  # a laptop's head is one no TPU VM can reach
    check_before_up(runtime)  # the network: checked (exit 2 naming the fix), the cluster's rule made
    with runtime.lock("up", timeout_s):
        # Fewer spares that would drop an active run's slice drop an idle one instead.
        busy = [i for run in runs.active(runtime.name) for i in run.slices]
        retired = retire_idle(runtime.spec, runtime.stored_spec(), busy, runs.spares(runtime.name))
        if retired != runtime.spec.retired_slices:
            runtime.use_spec(runtime.spec.model_copy(update={"retired_slices": retired}))
        plan = plan_up(runtime)
        blocked = runs_in_the_way(plan, runs.active(runtime.name))
        if blocked and not force:
            raise in_the_way(plan, blocked)
        for run, hit in blocked:
            cancel_run(runtime, runs, run, f"cancelling run {run.run_id}: 'up --force' takes slice(s) {hit} it runs on")
        first_time = runtime.store.get_cluster(runtime.name) is None
        # Which slices are the hot spares: those recorded still fit, else the highest free ones.
        busy = [i for run in runs.active(runtime.name) for i in run.slices]
        runs.set_spares(runtime.name, spares.assign(runtime.spec, runs.spares(runtime.name), busy))

        def before_converge() -> None:
            if on_plan is not None:
                on_plan(plan)
            if first_time and runtime.spec.simulated and runtime.spec.simulation.faults:
                simulation.arm_scripted_faults(runtime)

        try:
            runtime.bring_up(plan.changes, timeout_s, before_converge=before_converge)
        except PodmanagerError as failed:
            if isinstance(failed, SpecError):
                raise
            if delete_on_failure and first_time:
                raise FirstUpFailed(failed) from None
            if delete_on_failure:
                made = sorted(c.slice_index for c in plan.changes
                              if c.kind in ("create", "replace") and c.slice_index is not None)
                runtime.delete_created(made)
                failed.hint = "\n".join(filter(None, [failed.hint, f"--delete-on-failure: deleted the "
                                                                  f"slice(s) this up created: {made}"]))
            failed.hint = "\n".join(filter(None, [failed.hint, left_running(runtime)]))
            raise
        if runtime.connect_ray():
            # A new head (after a crash) has none of the old one's supervisors.
            restart_lost_supervisors(runtime, runs)
