"""The Cloud Storage buckets the TPU VMs use, checked before `up` creates anything and granted
as the token secret's read access is (`cloud/gcp/secrets.py`).

The VMs read podmanager's wheel from the stage bucket (`boot.stage`, or the gs:// wheel
`boot.podmanager` names) and read and write checkpoints in the checkpoint bucket
(`checkpoints`): without access, a boot fails on a 403 after the slices bill, and a checkpoint
write fails the program and spends `max_failures`. So, for each bucket:
- it must exist (else: the command that creates it);
- the VMs' service account must be allowed (roles/storage.objectViewer to read,
  roles/storage.objectUser to read and write): `up` adds the binding when the caller may change
  the bucket's IAM policy, and names the command for whoever may when it may not.
`problems` only reads, so the preflight names every problem before anything is made; `grant`
then makes the bindings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from podmanager.cloud import errors as cloud_errors
from podmanager.cloud.buckets import role_for
from podmanager.cloud.gcp.storage import BucketIam
from podmanager.controller.staging import stage_root
from podmanager.core.events import EventKind
from podmanager.core.spec import ClusterSpec, PodmanagerSource

Record = Callable[..., Any]


@dataclass(frozen=True)
class BucketNeed:
    """One bucket the VMs use: whether they write to it, and the spec field that names it."""

    bucket: str
    write: bool
    field: str


def bucket_of(url: str) -> str:
    return url.removeprefix("gs://").split("/", 1)[0]


def bucket_needs(spec: ClusterSpec, *, vms_boot: bool) -> list[BucketNeed]:
    """The gs:// buckets the spec's VMs read (the staged wheel, if they boot) and write (checkpoints)."""
    needs: dict[str, BucketNeed] = {}
    if spec.checkpoints and spec.checkpoints.startswith("gs://"):
        bucket = bucket_of(spec.checkpoints)
        needs[bucket] = BucketNeed(bucket, write=True, field="checkpoints")
    boot = spec.boot
    wheel = ""
    if vms_boot and boot.source in (PodmanagerSource.BUILT, PodmanagerSource.LOCAL_WHEEL):
        beside_checkpoints = not boot.stage and (spec.checkpoints or "").startswith("gs://")
        wheel, field = stage_root(spec), "checkpoints" if beside_checkpoints else "boot.stage"
    elif vms_boot and boot.source is PodmanagerSource.URL and (boot.podmanager or "").startswith("gs://"):
        wheel, field = boot.podmanager or "", "boot.podmanager"
    if wheel.startswith("gs://") and bucket_of(wheel) not in needs:
        needs[bucket_of(wheel)] = BucketNeed(bucket_of(wheel), write=False, field=field)
    return list(needs.values())


def grant_command(bucket: str, member: str, write: bool) -> str:
    return (f"gcloud storage buckets add-iam-policy-binding gs://{bucket} --member {member} "
            f"--role {role_for(write=write)}")


@dataclass
class BucketCheck:
    """The buckets of one `up`: `member` is the VMs' service account (serviceAccount:EMAIL)."""

    spec: ClusterSpec
    buckets: BucketIam
    member: str
    needs: list[BucketNeed]

    def problems(self) -> list[str]:
        """What keeps the VMs from their buckets and `up` from fixing it, each with its fix; reads only."""
        found = []
        for need in self.needs:
            use = "read and write" if need.write else "read"
            try:
                self.buckets.check_exists(need.bucket)
            except cloud_errors.NotFoundError:
                found.append(f"{need.field}: bucket {need.bucket} does not exist (the TPU VMs {use} it); create it: "
                             f"gcloud storage buckets create gs://{need.bucket} --project {self.spec.project} "
                             f"--uniform-bucket-level-access, or name another in {need.field}")
                continue
            if self.buckets.policy(need.bucket).allows(self.member, write=need.write):
                continue
            if not self.buckets.may_set_policy(need.bucket):
                found.append(f"{need.field}: the TPU VMs' service account ({self.member}) may not {use} bucket "
                             f"{need.bucket}, and you may not change its IAM policy; ask its owner to run: "
                             f"{grant_command(need.bucket, self.member, need.write)}")
        return found

    def grant(self, record: Record) -> None:
        """The VMs' account given the role each bucket needs, where it lacks it."""
        for need in self.needs:
            role = role_for(write=need.write)
            if self.buckets.grant(need.bucket, self.member, role, write=need.write):
                record(EventKind.BUCKET_GRANTED, f"{self.member} granted {role} on bucket {need.bucket} ({need.field})")
