"""A Cloud Storage bucket's IAM policy as the JSON API describes it (`GET /storage/v1/b/BUCKET/iam`),
in the fields the preflight reads and writes, and which roles let the TPU VMs read or write its
objects. The real client (`gcp/storage.py`) returns these records; the simulated project
(`emulator/sim/storage.py`) keeps them as its state.

The VMs read the stage bucket (podmanager's wheel) and read and write the checkpoint bucket
(orbax lists, creates and deletes objects). `up` grants the narrowest role that does it:
roles/storage.objectViewer and roles/storage.objectUser.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

READER_ROLE = "roles/storage.objectViewer"
WRITER_ROLE = "roles/storage.objectUser"
# Bucket roles that already let a member read (or read and write) the objects.
_WRITE_ROLES = frozenset({WRITER_ROLE, "roles/storage.objectAdmin", "roles/storage.admin"})
_READ_ROLES = _WRITE_ROLES | {READER_ROLE, "roles/storage.legacyObjectReader"}
SET_POLICY_PERMISSION = "storage.buckets.setIamPolicy"


class Binding(BaseModel):
    model_config = ConfigDict(frozen=True)

    role: str
    members: list[str] = Field(default_factory=list)
    condition: dict[str, str] | None = None  # a conditional binding: never taken for access, always kept


class BucketPolicy(BaseModel):
    """A bucket's IAM policy; `etag` is the read's, so a write over a concurrent change is refused (412)."""

    model_config = ConfigDict(frozen=True)

    bindings: list[Binding] = Field(default_factory=list)
    etag: str = ""
    version: int = 1

    def allows(self, member: str, *, write: bool) -> bool:
        """Whether `member` may read (and, with `write`, write) the objects, by an unconditional binding."""
        roles = _WRITE_ROLES if write else _READ_ROLES
        return any(b.role in roles and b.condition is None and member in b.members for b in self.bindings)

    def granting(self, member: str, role: str) -> BucketPolicy:
        """This policy with `member` added to `role`'s unconditional binding (made if missing)."""
        bindings = list(self.bindings)
        for index, binding in enumerate(bindings):
            if binding.role == role and binding.condition is None:
                bindings[index] = binding.model_copy(update={"members": [*binding.members, member]})
                break
        else:
            bindings.append(Binding(role=role, members=[member]))
        return self.model_copy(update={"bindings": bindings})


def role_for(*, write: bool) -> str:
    return WRITER_ROLE if write else READER_ROLE
