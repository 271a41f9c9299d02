"""Starting a run: pack its code, check it, claim its slices, keep its code, start its supervisor."""

from __future__ import annotations

import shutil
from pathlib import Path

from podmanager.api.submission import check_bucket, run_checkpoints, run_slices
from podmanager.attempts import package
from podmanager.attempts.attempt import new_run_id
from podmanager.cluster.cluster_runtime import ClusterRuntime
from podmanager.core import code_zip
from podmanager.core.code_zip import PackedCode
from podmanager.core.errors import PodmanagerError, SpecError
from podmanager.core.events import EventKind
from podmanager.core.workload import Workload
from podmanager.state import run_secrets
from podmanager.state.run_records import RunStore
from podmanager.supervision import supervisor_actor
from podmanager.supervision.supervisor import new_run

BUDGETS = ("max_preemptions", "max_failures", "max_hangs")


def packed(workload: Workload, code: PackedCode | None = None) -> PackedCode | None:
    """The run's code: `code` if it came packed (sent over the channel), else the workload's
    working dir packed here; None for a run that ships nothing."""
    if code is not None or workload.working_dir is None:
        return code
    return code_zip.pack(workload.working_dir)


def submit_run(runtime: ClusterRuntime, runs: RunStore, workload: Workload, budgets: dict[str, int],
               code: PackedCode | None = None) -> str:
    """Start a run of `workload` on `runtime`'s cluster and return its id at once. Bad input
    starts nothing and spends nothing: every check comes before the slices are claimed, and
    a failure after the claim gives them back. `code`: the working dir already packed where
    the user ran podmanager (see `packed`)."""
    if runtime.hosts is None:
        raise SpecError("simulation.boot_hosts is false: this dry-run cluster has no hosts to run on")
    workload = workload.submitted(Path.cwd())
    code = packed(workload, code)
    slices = run_slices(runtime.spec, workload, runs.spares(runtime.name), shipped=code.files if code else None)
    checkpoints = run_checkpoints(runtime.spec, workload, slices)
    unknown = set(budgets) - set(BUDGETS)
    if unknown:
        raise SpecError(f"budgets: unknown {sorted(unknown)}; use {', '.join(BUDGETS)}")
    # A head whose raylet died answers on its port but places no supervisor: the run would
    # wait in `starting` for ever, holding its slices.
    head_problem = runtime.hosts.head_problem()
    if head_problem is not None or not runtime.connect_ray():
        raise PodmanagerError(f"cluster {runtime.name}: {head_problem or 'the cluster has no Ray head'}",
                              hint="Run 'podmanager up -f SPEC': it starts the head again, the hosts rejoin and "
                                   "runs carry on.")
    warnings = [w for w in (checkpoints.warning, check_bucket(checkpoints.directory)) if w]
    # "Slices free? Then they are this run's" is one transaction: of runs submitted at
    # the same moment on a slice, exactly one gets it.
    record = new_run(runtime, workload, new_run_id(workload), slices, checkpoints.directory, budgets,
                     warnings=warnings)
    holder = runs.claim(record)
    run_id = record.run_id
    if holder is not None:
        raise SpecError(
            f"run: slice(s) {sorted(set(holder.slices) & set(slices))} are busy with run {holder.run_id} "
            f"({holder.status})",
            hint=f"Wait for it ('podmanager attach {holder.run_id}'), cancel it ('podmanager cancel "
                 f"{holder.run_id}'), or run on other slices with --slices.")
    submitted = False
    try:
        run_secrets.save(runtime.name, run_id, workload.env)
        if code is not None:
            package.keep(code, runtime.name, run_id)
        runtime.record(EventKind.RUN_SUBMITTED, f"run {run_id}: {workload.display_name} submitted on slice(s) {slices}",
                       run_id=run_id)
        submitted = True
        for warning in warnings:
            runtime.record(EventKind.WARNING, f"run {run_id}: {warning}", run_id=run_id)
        supervisor_actor.start_supervisor(runtime.name, run_id, code.digest if code else None)
    except BaseException as error:
        # Nothing started: the slices are free again and nothing is spent (a typo costs nothing).
        runs.release(run_id)
        run_secrets.remove(runtime.name, run_id)
        shutil.rmtree(package.kept_folder(runtime.name, run_id), ignore_errors=True)
        if submitted:
            runtime.record(EventKind.RUN_NOT_STARTED, f"run {run_id} did not start ({type(error).__name__}: {error}); "
                           f"slice(s) {slices} are free again", run_id=run_id)
        raise
    return run_id
