"""The simulated project's Cloud Storage buckets and their IAM policies, over the `StorageState`
the simulated cloud keeps (and saves) with the rest of its state. Objects are not here: they
are files under `$PODMANAGER_HOME/sim/storage/` (`emulator/storage.py` serves their downloads).

The project starts with one bucket, the dry run's stage bucket (`<project>-podmanager`), whose
policy grants nobody object access: `up` grants the VMs' account as it would on Google Cloud.
A test makes or deletes buckets, and refuses the caller IAM changes, through the control service.
"""

from __future__ import annotations

from podmanager.cloud import errors as cloud_errors
from podmanager.cloud.buckets import Binding, BucketPolicy
from podmanager.controller.staging import simulated_bucket
from podmanager.emulator.sim.records import StorageState


class StaleEtagError(cloud_errors.InvalidRequestError):
    """A policy written over one that changed since it was read (HTTP 412)."""


class SimStorage:
    """Cloud Storage's bucket calls on one project's `StorageState`; the caller holds the
    simulated cloud's lock (`SimCloud.storage`) and saves the state when `changed`."""

    def __init__(self, state: StorageState, project: str):
        self.state = state
        self.project = project
        self.changed = False
        if not state.seeded:
            self.create_bucket(simulated_bucket(project))
            state.seeded = True

    def bucket(self, name: str) -> BucketPolicy:
        found = self.state.buckets.get(name)
        if found is None:
            raise cloud_errors.NotFoundError(f"The specified bucket does not exist: {name}")
        return found

    def set_policy(self, name: str, policy: BucketPolicy) -> BucketPolicy:
        current = self.bucket(name)
        if self.state.iam_changes_denied:
            raise cloud_errors.PermissionDeniedError(
                f"the caller does not have storage.buckets.setIamPolicy access to the Google Cloud Storage bucket {name}")
        if policy.etag and policy.etag != current.etag:
            raise StaleEtagError(f"the IAM policy of bucket {name} changed since it was read (etag {policy.etag})")
        written = policy.model_copy(update={"etag": str(int(current.etag) + 1)})
        self.state.buckets[name] = written
        self.changed = True
        return written

    def may_set_policy(self, name: str) -> bool:
        self.bucket(name)
        return not self.state.iam_changes_denied

    def create_bucket(self, name: str) -> None:
        if name in self.state.buckets:
            raise cloud_errors.AlreadyExistsError(f"bucket {name} exists already")
        # A new bucket's policy, as Google makes it: the project's Owners and Editors own it, its
        # Viewers read it ("convenience values":
        # https://docs.cloud.google.com/storage/docs/access-control/iam#convenience-values).
        owners = Binding(role="roles/storage.legacyBucketOwner",
                         members=[f"projectOwner:{self.project}", f"projectEditor:{self.project}"])
        readers = Binding(role="roles/storage.legacyBucketReader", members=[f"projectViewer:{self.project}"])
        self.state.buckets[name] = BucketPolicy(bindings=[owners, readers], etag="1")
        self.changed = True

    def delete_bucket(self, name: str) -> None:
        self.bucket(name)
        del self.state.buckets[name]
        self.changed = True

    def deny_iam_changes(self, denied: bool = True) -> None:
        self.state.iam_changes_denied = denied
        self.changed = True
