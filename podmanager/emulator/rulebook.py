"""Google Cloud's rules the emulator enforces, each from the page that documents it: the emulator
answers as Google Cloud does, never from what podmanager happens to send. One rule a function or
constant with its source and a one-line summary; the REST and metadata handlers call into these.
Where the documentation is silent the comment says so and the stricter answer is chosen.

(What a request's body and parameters may hold, by the discovery documents' schemas, is checked
elsewhere; these are the rules that schema cannot state.)
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from collections import deque

from podmanager.cloud import errors as cloud_errors
from podmanager.emulator import list_filter

# ---------------------------------------------------------------------- Compute Engine: list filters

# compute.v1's own definition of every list's `filter` parameter (the discovery document shipped in
# google-api-python-client, revision 20261106), also at
# https://cloud.google.com/compute/docs/reference/rest/v1/instances/list#query-parameters
# Several expressions each within parentheses; `=`-style and `eq`/`ne` never mixed. The wording of
# the refusal is as users report it ("Invalid list filter expression"), not in Google's pages.


def compute_list_filter(text: str) -> list_filter.ListFilter:
    """A list's `filter` by Compute's grammar (`list_filter.py`); 400 "Invalid list filter expression"."""
    try:
        return list_filter.parse(text)
    except list_filter.InvalidFilter as bad:
        raise cloud_errors.InvalidRequestError(
            f"Invalid value for field 'filter': '{text}'. Invalid list filter expression: {bad}.") from bad


# ---------------------------------------------------------------------- Compute Engine: guest attributes

# https://cloud.google.com/compute/docs/metadata/manage-guest-attributes
# Guest attributes are off unless `enable-guest-attributes` is TRUE in the instance's or the
# project's metadata; a write to them from inside a VM where they are off is refused. The 403's
# wording is as users report it. The page shows the value TRUE; any other value counts as off
# (the documentation says no more: the stricter reading).
GUEST_ATTRIBUTES_KEY = "enable-guest-attributes"
GUEST_ATTRIBUTES_DISABLED = "Guest attributes endpoint access is disabled."


def guest_attributes_enabled(instance_metadata: dict[str, str], project_metadata: dict[str, str]) -> bool:
    """Whether the VM may write guest attributes: the key TRUE on the instance or the project."""
    return "TRUE" in (instance_metadata.get(GUEST_ATTRIBUTES_KEY), project_metadata.get(GUEST_ATTRIBUTES_KEY))


# The same page: at most 10 queries a minute per VM, in bursts of at most 3 a second; beyond
# that, writes may be dropped without an error. "May": the emulator always drops them (the
# stricter choice) and logs each one it drops, so a test sees the writer overran.
GUEST_ATTRIBUTE_WRITES_PER_MINUTE = 10
GUEST_ATTRIBUTE_WRITES_PER_SECOND = 3


class GuestAttributeRate:
    """One VM's guest-attribute writes over the last minute: whether the next is within the rate."""

    def __init__(self) -> None:
        self._times: deque[float] = deque()
        self._lock = threading.Lock()

    def admit(self, now: float) -> bool:
        """Whether a write at `now` (seconds) is taken; a taken one counts toward the next."""
        with self._lock:
            while self._times and self._times[0] <= now - 60.0:
                self._times.popleft()
            last_second = sum(1 for t in self._times if t > now - 1.0)
            if len(self._times) >= GUEST_ATTRIBUTE_WRITES_PER_MINUTE or last_second >= GUEST_ATTRIBUTE_WRITES_PER_SECOND:
                return False
            self._times.append(now)
            return True


# ---------------------------------------------------------------------- Compute Engine: operations

# compute.v1's definition of zoneOperations.wait (and the region and global ones), also at
# https://cloud.google.com/compute/docs/reference/rest/v1/zoneOperations/wait
# It returns when the operation is DONE or when the request nears its 2-minute deadline, whichever
# is first, with the operation as it is then (maybe not DONE: "be prepared to retry"); under load
# it may return sooner, even at once.
OPERATION_WAIT_DEADLINE_S = 120.0


# ---------------------------------------------------------------------- Compute Engine: an instance's life

# https://cloud.google.com/compute/docs/instances/instance-life-cycle
# https://cloud.google.com/compute/docs/instances/stop-start-instance
# https://cloud.google.com/compute/docs/instances/suspend-resume-instance
# A stopped instance is TERMINATED and is started again with instances.start (its startup script
# runs again, on the same disk); a suspended one is SUSPENDED and is resumed with
# instances.resume (its memory restored: nothing runs again). Either may be deleted. What the API
# answers to a call in another state (start of a SUSPENDED instance, resume of a TERMINATED one,
# stop of one already stopped) the pages do not say: the stricter answer, a 400, is given.
#
# https://cloud.google.com/compute/docs/instances/reset-instance
# A reset wipes the memory and boots the instance again, as a machine's reset button does; it
# stays RUNNING and keeps its disks, and its startup script runs again at the boot. The page
# speaks of resetting a running VM only: any other state is refused (400), the stricter answer.
#
# https://cloud.google.com/compute/docs/instances/changing-machine-type-of-stopped-instance
# The machine type is changed only while the instance is stopped (TERMINATED); a type the
# zone does not offer is refused as an insert's is.
TERMINATED, SUSPENDED = "TERMINATED", "SUSPENDED"
_ALLOWED_FROM = {"start": (TERMINATED,), "resume": (SUSPENDED,), "stop": ("RUNNING", "PROVISIONING"),
                 "suspend": ("RUNNING",), "reset": ("RUNNING",), "setMachineType": (TERMINATED,)}


def instance_may(name: str, status: str, verb: str) -> None:
    """400 unless an instance in `status` may be `verb`ed (start, resume, stop, suspend, reset,
    setMachineType)."""
    if status not in _ALLOWED_FROM[verb]:
        raise cloud_errors.InvalidRequestError(
            f"The instance '{name}' is {status}: instances.{verb} needs it {' or '.join(_ALLOWED_FROM[verb])}.")


# ---------------------------------------------------------------------- Compute Engine: disks and metadata

# https://cloud.google.com/compute/docs/disks/resize-persistent-disk and
# https://cloud.google.com/compute/docs/reference/rest/v1/disks/resize
# A disk is resized only to a larger size ("You can only increase, and not decrease, the size of
# a disk"), while the VM runs or not; the wording of the 400 is as users report it.


def disk_may_grow(name: str, size_gb: int, asked_gb: int) -> None:
    """400 unless `asked_gb` is larger than the disk's `size_gb`."""
    if asked_gb <= size_gb:
        raise cloud_errors.InvalidRequestError(
            f"Invalid value for field 'sizeGb': '{asked_gb}'. Requested disk size cannot be smaller than or equal "
            f"to the current disk size {size_gb} GB of disk '{name}'; a disk can only grow.")


# https://cloud.google.com/compute/docs/reference/rest/v1/instances/setMetadata (the Metadata
# resource's `fingerprint`): an instance's metadata is replaced whole, and only with the
# fingerprint of the metadata as it is now; without it, or with a stale one, the request
# "will fail with error 412 conditionNotMet". (The fingerprint changes with every change.)


class ConditionNotMet(cloud_errors.InvalidRequestError):
    """Google's 412 conditionNotMet (served as HTTP 412)."""


def metadata_fingerprint(items: dict[str, str]) -> str:
    """The metadata's fingerprint as the API reports it: base64 of a hash of its items (Google's
    hash is its own; any value that changes with every change does)."""
    digest = hashlib.sha256(json.dumps(sorted(items.items())).encode()).digest()[:8]
    return base64.b64encode(digest).decode()


def metadata_may_change(name: str, current: dict[str, str], fingerprint: str) -> None:
    """412 unless `fingerprint` is the instance's metadata's as it is now."""
    if fingerprint != metadata_fingerprint(current):
        raise ConditionNotMet(f"Supplied fingerprint does not match current metadata fingerprint of instance "
                              f"'{name}'. (conditionNotMet)")


# ---------------------------------------------------------------------- Compute Engine: how long it takes

# How long an instance takes to become RUNNING and to be deleted: no Google page gives a figure.
# Deletes are reported to take 15-50 s (DESIGN.md, "zoneOperations.wait"); for inserts nothing
# is documented, and the stricter answer is the slower one within what users report for a small
# Debian VM (tens of seconds). The defaults of `simulation.instance_create_latency_s` and
# `simulation.instance_delete_latency_s`; a stop or suspend takes a delete's time, a start or
# resume an insert's.
INSTANCE_CREATE_S = 20.0
INSTANCE_DELETE_S = 30.0


# ---------------------------------------------------------------------- IAM: custom roles

# https://docs.cloud.google.com/iam/docs/reference/rest/v1/projects.roles/create (`roleId`): "A
# role ID may contain alphanumeric characters, underscores (_), and periods (.). It must contain a
# minimum of 3 characters and a maximum of 64 characters."
CUSTOM_ROLE_ID = re.compile(r"[A-Za-z0-9_.]{3,64}")

# The Role schema (iam.v1's discovery document, `title`): "Typically this is limited to 100 UTF-8
# bytes." "Typically": the emulator refuses a longer one (the stricter reading).
CUSTOM_ROLE_TITLE_BYTES = 100

# https://docs.cloud.google.com/iam/quotas: at most 300 custom roles in a project (a deleted one
# counts until it is permanently deleted: the delete page below) and 3,000 permissions in one.
CUSTOM_ROLES_PER_PROJECT = 300
PERMISSIONS_PER_CUSTOM_ROLE = 3000

# https://docs.cloud.google.com/iam/docs/reference/rest/v1/projects.roles/delete: a deleted role's
# bindings stay but have no effect, no new binding may name it, and it can be undeleted for 7
# days; then it is deleted for good. Its id is free again only once that is done: 37 days after
# the delete (7 + the 30 days permanent deletion takes), as Google's custom-roles page is quoted
# [R: https://docs.cloud.google.com/iam/docs/creating-custom-roles, the figure from a copy of it];
# until then a create with that id is refused and the role is to be undeleted instead.
CUSTOM_ROLE_UNDELETE_S = 7 * 86400.0
CUSTOM_ROLE_ID_REUSE_S = 37 * 86400.0

# https://docs.cloud.google.com/iam/docs/custom-roles-permissions-support: each permission is
# SUPPORTED, TESTING (may be included; "you might see unexpected behavior") or NOT_SUPPORTED in
# custom roles; "If the response omits the level of support for a permission, then that
# permission is supported." And https://docs.cloud.google.com/iam/docs/creating-custom-roles: a
# permission usable only on an organization (or a folder) cannot be in a project's custom role.
# The levels of the permissions the emulated methods check could not be read one by one from the
# stored copy of the support page; none is known to be TESTING or NOT_SUPPORTED, so the table
# holds only the organization's and folders' permissions. A permission the simulated project does
# not know at all is refused as not valid (the stricter answer: Google refuses a permission it
# does not know; the emulator knows only the ones its roles hold).
CUSTOM_ROLE_SUPPORT_PREFIXES = {"resourcemanager.organizations.": "NOT_SUPPORTED",
                                "resourcemanager.folders.": "NOT_SUPPORTED"}


def custom_role_support(permission: str) -> str:
    """SUPPORTED, TESTING or NOT_SUPPORTED: the permission's level in a project's custom role."""
    return next((level for prefix, level in CUSTOM_ROLE_SUPPORT_PREFIXES.items() if permission.startswith(prefix)),
                "SUPPORTED")
