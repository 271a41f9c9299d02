"""What a run is checked against before anything starts, and what it gets by default."""

from __future__ import annotations

from podmanager.core import paths
from podmanager.core.errors import SpecError
from podmanager.core.spec import ClusterSpec
from podmanager.core.workload import Workload, check_parallelism


def run_slices(spec: ClusterSpec, workload: Workload) -> list[int]:
    """The run's slices, after every check that needs no Ray (the slices exist, the mesh fits
    their chips, the program is there): bad input starts nothing."""
    known = [s.index for s in spec.slice_list()]
    slices = workload.slices if workload.slices is not None else known
    unknown = sorted(set(slices) - set(known))
    if unknown:
        raise SpecError(f"--slices: {unknown} not in the cluster (slices {known})")
    if workload.parallelism:
        check_parallelism(workload.parallelism, sum(s.accelerator.chips for s in spec.slice_list() if s.index in slices))
    workload.check_program()
    return sorted(slices)


def default_checkpoint_dir(spec: ClusterSpec, workload: Workload) -> str | None:
    """Where the run checkpoints: the workload's own choice, else (dry runs) one folder per
    cluster and program, so running the same program again resumes where it stopped."""
    if workload.checkpoint_dir:
        return workload.checkpoint_dir
    if spec.simulated:  # every simulated host shares this machine's disk
        return str(paths.cluster_dir(spec.name) / "checkpoints" / workload.display_name)
    return None
