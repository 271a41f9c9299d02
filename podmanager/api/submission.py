"""What a run is checked against before anything starts, and what it gets by default."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Collection

from podmanager.core import paths, spares
from podmanager.core.errors import SpecError
from podmanager.core.spec import ClusterSpec
from podmanager.core.workload import Workload, check_parallelism
from podmanager.runtime.checkpoints import is_url

BUCKET_CHECK_S = 10.0  # a submit waits this long for Cloud Storage to say whether a bucket exists
NO_CHECKPOINTS_WARNING = ("no checkpoint dir: a preemption restarts this run from step 0; "
                          "pass --checkpoint-dir gs://... or set checkpoints: in the spec")


def run_slices(spec: ClusterSpec, workload: Workload, spare_slices: list[int] | None = None, *,
               shipped: Collection[str] | None = None) -> list[int]:
    """The run's slices, after every check that needs no Ray (the slices exist and are no hot
    spares, the mesh fits their chips, the program is there and shipped: `shipped`, the names
    of the files packed): bad input starts nothing. Without `--slices` a run gets every working
    slice (`spare_slices`: the cluster's spares now)."""
    known = [s.index for s in spec.slice_list()]
    slices = workload.slices if workload.slices is not None else spares.working(spec, spare_slices or [])
    unknown = sorted(set(slices) - set(known))
    if unknown:
        raise SpecError(f"--slices: {unknown} not in the cluster (slices {known})")
    taken = sorted(set(slices) & set(spare_slices or []))
    if taken:
        raise SpecError(f"--slices: slice(s) {taken} are hot spares of {spec.name}; a run never works on a spare",
                        hint="Leave --slices out (a run gets every working slice) or name working slices "
                             "('podmanager status' shows which are spares).")
    if workload.min_slices is not None and workload.min_slices > len(slices):
        raise SpecError(f"--min-slices: {workload.min_slices} is more than the run's {len(slices)} slice(s) {sorted(slices)}",
                        hint=f"Give at most {len(slices)}: the fewest slices the run may go on with while a lost "
                             "one is made again.")
    if workload.parallelism:
        check_parallelism(workload.parallelism, sum(s.accelerator.chips for s in spec.slice_list() if s.index in slices))
    workload.check_program(shipped)
    return sorted(slices)


@dataclass(frozen=True)
class RunCheckpoints:
    """Where a run checkpoints, decided once at submit and stored in its record.

    `directory`: absolute local path or URL, None for no checkpoints. `warning`: what the
    user should know at submit and in `runs` (e.g. a preemption restarts from step 0)."""

    directory: str | None
    warning: str | None = None


def run_checkpoints(spec: ClusterSpec, workload: Workload, slices: list[int] | None = None) -> RunCheckpoints:
    """The run's checkpoint dir, checked before anything starts. `slices`: the run's (default:
    the workload's choice, else every slice of the cluster).

    The dir is `--checkpoint-dir` if given, else `<checkpoints>/<cluster>/<program>` from
    the spec, else (dry runs) one local folder per cluster and program, so running the same
    program again resumes where it stopped. On GCP a run of more than one host with a local
    dir is refused: each host would write its part to its own disk and no host could read
    the whole checkpoint back, and a replaced slice comes back without that disk."""
    if slices is None:
        slices = workload.slices if workload.slices is not None else [s.index for s in spec.slice_list()]
    hosts = sum(s.accelerator.hosts for s in spec.slice_list() if s.index in slices)
    if workload.checkpoint_dir:
        source = "--checkpoint-dir"
        directory = workload.checkpoint_dir
        if not is_url(directory):
            # The supervisor and the hosts run in other folders than this client.
            directory = os.path.abspath(os.path.expanduser(directory))
    elif spec.checkpoints:
        source = "checkpoints"
        directory = _join(spec.checkpoints, spec.name, workload.display_name)
    elif spec.simulated:  # every simulated host shares this machine's disk: it stands for the bucket
        return RunCheckpoints(str(paths.cluster_dir(spec.name) / "checkpoints" / workload.display_name))
    else:
        return RunCheckpoints(None, NO_CHECKPOINTS_WARNING)

    if is_url(directory):
        return RunCheckpoints(directory)
    if os.path.isfile(directory):
        raise SpecError(f"{source}: {directory} is a file; checkpoints need a folder (or a gs:// URL)",
                        hint="Name a folder that does not exist yet or holds this program's checkpoints.")
    if spec.simulated:  # the hosts share this disk: check it here, as they will find it
        _check_writable(source, directory)
        return RunCheckpoints(directory)
    if hosts > 1:
        fix = "set 'checkpoints: gs://BUCKET/PREFIX' in the spec"
        if source == "--checkpoint-dir" and spec.checkpoints and is_url(spec.checkpoints):
            fix = f"drop it to use the spec's checkpoints: {spec.checkpoints}"
        raise SpecError(f"{source}: {directory} is a folder on each host's own disk, but this run spans "
                        f"{hosts} hosts, which must all write to and read from one shared storage",
                        hint=f"Pass --checkpoint-dir gs://BUCKET/PATH, or {fix} (every host reaches a bucket, "
                             "a replaced slice's too).")
    # One host: the checkpoint is whole, but a preempted slice is recreated without its disk.
    return RunCheckpoints(directory, f"checkpoint dir {directory} is on the host's own disk: a preempted "
                                     "slice comes back without it and the run restarts from step 0; "
                                     "use --checkpoint-dir gs://... or checkpoints: in the spec")


def _check_writable(source: str, directory: str) -> None:
    """The folder exists and can be written, or can be made: the nearest existing folder on
    its path is a folder this user may write in."""
    existing = directory
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise SpecError(f"{source}: {directory} cannot be made: {existing} is a file",
                        hint="Name a folder whose path holds no file.")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise SpecError(f"{source}: {directory} is not writable ({existing} belongs to someone else or is "
                        "read-only)", hint="Name a folder you may write in.")


def default_checkpoint_dir(spec: ClusterSpec, workload: Workload) -> str | None:
    """The run's checkpoint dir (see `run_checkpoints`, which also raises its SpecErrors)."""
    return run_checkpoints(spec, workload).directory


def _join(root: str, *parts: str) -> str:
    """`root/parts...` for a URL or a local path alike (a URL is never normalised)."""
    return "/".join([root.rstrip("/"), *parts]) if is_url(root) else os.path.join(root, *parts)


def check_bucket(directory: str | None, *, timeout_s: float = BUCKET_CHECK_S) -> str | None:
    """A `gs://` checkpoint dir's bucket exists, as Cloud Storage tells this machine's
    credentials: SpecError when it says there is no such bucket (a typo costs no attempt).
    When it cannot tell within `timeout_s` (no credentials or no network here; the hosts,
    with their service account, may still reach it), the reason comes back as a warning."""
    if directory is None or not directory.startswith("gs://"):
        return None
    bucket = directory[len("gs://"):].split("/", 1)[0]
    answers: list[BaseException | None] = []

    def ask() -> None:
        try:
            import gcsfs  # loads aiohttp and google-auth: only when a run checkpoints to a bucket

            gcsfs.GCSFileSystem(skip_instance_cache=True).info(bucket)
            answers.append(None)
        except BaseException as error:  # noqa: BLE001 - handed to the caller's thread below
            answers.append(error)

    # In a thread: gcsfs retries a silent network for longer than a submit should wait.
    asking = threading.Thread(target=ask, name="bucket-check", daemon=True)
    asking.start()
    asking.join(timeout_s)
    if not answers:
        return f"could not check that bucket gs://{bucket} exists: Cloud Storage did not answer within {timeout_s:.0f}s"
    if isinstance(answers[0], FileNotFoundError):
        raise SpecError(f"checkpoint dir {directory}: bucket gs://{bucket} does not exist",
                        hint=f"Create it ('gcloud storage buckets create gs://{bucket} --location REGION'), or pass "
                             "--checkpoint-dir (or set checkpoints: in the spec) with a bucket that exists.")
    if answers[0] is not None:
        return f"could not check that bucket gs://{bucket} exists ({type(answers[0]).__name__}: {answers[0]})"
    return None
