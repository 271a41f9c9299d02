"""The simulated project's IAM policy and enabled services, and the starting points a project
can have ("what the console would do"); kept in the emulator's record of the project.

Kinds (facts: /work/shared/DESIGN.md "Google Cloud's rules"):
- `no-organization` (the default): a project without an organization, made by its user, who is
  Owner; the APIs podmanager uses enabled; the default compute account has Editor, as Google
  still grants it outside an organization
  (https://docs.cloud.google.com/compute/docs/access/service-accounts#default_service_account).
- `new`: a new project in a secure-by-default organization (every organization since 3 May
  2024): the user is Owner, the default compute account has no role at all
  (`iam.automaticIamGrantsForDefaultServiceAccounts`,
  https://docs.cloud.google.com/resource-manager/docs/secure-by-default-organizations), and only
  the APIs a new project has enabled (https://docs.cloud.google.com/service-usage/docs/enabled-service#default):
  not Compute Engine, Cloud TPU, Secret Manager, IAM or Resource Manager.

Besides the policy it keeps the project's service accounts (those made with the IAM API; the
default compute account exists once Compute Engine is enabled: "Enabling Compute creates ... the
default compute account", https://docs.cloud.google.com/compute/docs/access/service-accounts#default_service_account)
and each account's own policy (who may act as it), an etag that changes with every write of
the project's policy (https://docs.cloud.google.com/iam/docs/policies#etag), and the project's
custom roles (`custom_roles.py`), which a binding grants as a predefined role's does.
"""

from __future__ import annotations

import base64
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, TypeVar

from pydantic import BaseModel

from podmanager.core import paths
from podmanager.core.errors import SpecError
from podmanager.core.files import write_atomic
from podmanager.emulator.iam import methods
from podmanager.emulator.iam.custom_roles import CustomRole
from podmanager.emulator.iam.roles import ROLES, permissions_of
from podmanager.emulator.iam.tokens import USER

# What a new project has enabled (console or gcloud), per the page cited above.
NEW_PROJECT_SERVICES = ("bigquery.googleapis.com", "bigquerystorage.googleapis.com", "logging.googleapis.com",
                        "monitoring.googleapis.com", "serviceusage.googleapis.com", "storage.googleapis.com",
                        "storage-api.googleapis.com", "storage-component.googleapis.com",
                        "cloudapis.googleapis.com", "datastore.googleapis.com", "sql-component.googleapis.com")
PODMANAGER_SERVICES = (methods.COMPUTE, methods.TPU, methods.SECRET_MANAGER, methods.STORAGE, methods.IAM,
                       methods.RESOURCE_MANAGER, methods.SERVICE_USAGE)
KINDS = ("no-organization", "new")
_CONVENIENCE = ("projectOwner", "projectEditor", "projectViewer")


class ProjectPolicy(BaseModel):
    """What the emulator keeps: the kind it started as, role -> members, the enabled APIs."""

    kind: str
    bindings: dict[str, list[str]]
    services: list[str]
    accounts: dict[str, str] = {}  # email -> display name: the service accounts made with the IAM API
    account_bindings: dict[str, dict[str, list[str]]] = {}  # email -> its own policy (role -> members)
    version: int = 0  # every write of `bindings` counts one: the etag
    custom_roles: dict[str, CustomRole] = {}  # role id -> the role (`projects/P/roles/ID`)


T = TypeVar("T")


class StalePolicy(Exception):
    """A write carried an etag other than the policy's (409 ABORTED)."""


class NoSuchAccount(Exception):
    """A member or a VM names a service account the project does not have."""

    def __init__(self, email: str):
        super().__init__(email)
        self.email = email


def default_compute_account(number: str) -> str:
    return f"serviceAccount:{number}-compute@developer.gserviceaccount.com"


def starting_point(kind: str, number: str) -> ProjectPolicy:
    """The project as Google makes it for `kind` (see the module's text)."""
    if kind == "no-organization":
        return ProjectPolicy(kind=kind, bindings={"roles/owner": [USER], "roles/editor": [default_compute_account(number)]},
                             services=sorted({*NEW_PROJECT_SERVICES, *PODMANAGER_SERVICES}))
    if kind == "new":
        return ProjectPolicy(kind=kind, bindings={"roles/owner": [USER]}, services=sorted(NEW_PROJECT_SERVICES))
    raise SpecError(f"--kind {kind!r}: not a kind of project the simulated cloud knows",
                    hint=f"Use one of: {', '.join(KINDS)}.")


def policy_path(project: str) -> Path:
    return paths.sim_home() / "sim" / "iam" / f"{paths.one_name(project, 'project')}.json"


class ProjectIam:
    """One project's policy and services, thread-safe; saved on every change when `saved_at`."""

    def __init__(self, number: str, policy: ProjectPolicy, saved_at: Path | None = None, *, project: str = "",
                 clock: Callable[[], float] = time.time):
        self.number = number
        self.project = project  # its id: what its custom roles' names hold
        self._policy = policy
        self._saved_at = saved_at
        self._clock = clock
        self._lock = threading.Lock()

    @classmethod
    def load(cls, project: str, number: str, *, persist: bool) -> ProjectIam:
        """The project's saved policy (a persistent emulator), else the default starting point."""
        where = policy_path(project) if persist else None
        if where is not None and where.is_file():
            return cls(number, ProjectPolicy.model_validate_json(where.read_text()), where, project=project)
        return cls(number, starting_point("no-organization", number), where, project=project)

    def policy(self) -> ProjectPolicy:
        with self._lock:
            return self._policy.model_copy(deep=True)

    def _changed(self) -> None:
        if self._saved_at is not None:
            paths.private_dir(self._saved_at.parent)
            write_atomic(self._saved_at, self._policy.model_dump_json())

    def etag(self) -> str:
        with self._lock:
            return base64.b64encode(f"pm-{self._policy.version}".encode()).decode()

    def account_exists(self, email: str) -> bool:
        """Whether the project has the service account: one made with the IAM API, or the
        default compute account once Compute Engine is enabled. Other projects' accounts and
        Google's service agents are not simulated: they count as absent (the stricter answer)."""
        with self._lock:
            if email in self._policy.accounts:
                return True
            compute_on = methods.COMPUTE in self._policy.services
        return compute_on and f"serviceAccount:{email}" == default_compute_account(self.number)

    def create_account(self, email: str, display_name: str) -> bool:
        """Make the service account; False if it exists already (Google's 409)."""
        with self._lock:
            if email in self._policy.accounts:
                return False
            self._policy.accounts[email] = display_name
            self._changed()
            return True

    def account_policy(self, email: str) -> dict[str, list[str]]:
        with self._lock:
            return {role: list(members) for role, members in self._policy.account_bindings.get(email, {}).items()}

    def set_account_policy(self, email: str, bindings: dict[str, list[str]]) -> None:
        self._check_members(bindings)
        with self._lock:
            self._policy.account_bindings[email] = {role: list(members) for role, members in bindings.items() if members}
            self._changed()

    def set_bindings(self, bindings: dict[str, list[str]], etag: str | None) -> None:
        """The project's policy written whole (`projects.setIamPolicy`): StalePolicy when `etag`
        is not the current one, NoSuchAccount for a service account the project lacks."""
        self._check_members(bindings)
        with self._lock:
            current = base64.b64encode(f"pm-{self._policy.version}".encode()).decode()
            if etag and etag != current:
                raise StalePolicy(etag)
            self._policy.bindings = {role: list(members) for role, members in bindings.items() if members}
            self._policy.version += 1
            self._changed()

    def _check_members(self, bindings: dict[str, list[str]]) -> None:
        for members in bindings.values():
            for member in members:
                kind, _, email = member.partition(":")
                if kind == "serviceAccount" and not self.account_exists(email):
                    raise NoSuchAccount(email)

    def holds(self, principal: str, permission: str, extra: Iterable[tuple[str, Iterable[str]]] = ()) -> bool:
        """Whether `principal` holds `permission` by the project's policy or by `extra` (a
        resource's own bindings: role, members), as IAM's inheritance reads them."""
        with self._lock:
            bindings = [*self._policy.bindings.items(), *extra]
            basic = {kind: principal in self._policy.bindings.get(f"roles/{kind.removeprefix('project').lower()}", [])
                     for kind in _CONVENIENCE}
            granted = {role: self._grants(role) for role, _ in bindings}
        # A member `projectEditor:P` (a bucket's policy) is whoever holds roles/editor on the project
        # (https://docs.cloud.google.com/storage/docs/access-control/iam#convenience-values).
        return any(permission in granted[role]
                   and any(member == principal or (member.split(":")[0] in basic and basic[member.split(":")[0]])
                           for member in members)
                   for role, members in bindings)

    def _grants(self, role: str) -> frozenset[str]:
        """What a binding to `role` grants: a predefined role's permissions, or a live custom
        role's of this project (another project's grants nothing here: "Custom roles can only be
        used to grant permissions in policies for the same project",
        https://docs.cloud.google.com/iam/docs/roles-overview#custom). Called holding the lock."""
        prefix = f"projects/{self.project}/roles/"
        if not role.startswith("projects/"):
            return permissions_of(role)
        found = self._policy.custom_roles.get(role.removeprefix(prefix)) if role.startswith(prefix) else None
        return found.grants() if found is not None else frozenset()

    def bindable(self, role: str) -> str | None:
        """None if a binding may name `role` (a predefined role known here, or a live custom role
        of this project); else why not (a deleted role may not be bound: the delete page in
        `custom_roles.py`)."""
        if role in ROLES:
            return None
        prefix = f"projects/{self.project}/roles/"
        with self._lock:
            found = self._policy.custom_roles.get(role.removeprefix(prefix)) if role.startswith(prefix) else None
        if found is None:
            return f"Role ({role}) does not exist in the resource's hierarchy."
        if found.deleted_at is not None:
            return f"Role ({role}) is deleted: a binding may not name it."
        return None

    # ------------------------------------------------------------------ custom roles

    def roles_call(self, change: Callable[..., T], *args: Any) -> T:
        """`change(roles, project, *args, now)` (a `custom_roles` function) on this project's
        custom roles under the lock, saved; RoleRefusal as it raises. The role answered is a copy."""
        with self._lock:
            found = change(self._policy.custom_roles, self.project, *args, self._clock())
            self._changed()
            return found.model_copy(deep=True) if isinstance(found, CustomRole) else found

    def enabled(self, service: str) -> bool:
        with self._lock:
            return service in self._policy.services

    # ------------------------------------------------------------------ what the console would do

    def set_kind(self, kind: str) -> None:
        with self._lock:
            self._policy = starting_point(kind, self.number)
            self._changed()

    def grant(self, role: str, member: str) -> None:
        if self.bindable(role) is not None:
            raise SpecError(f"--grant {role!r}: a role the simulated project does not know",
                            hint=f"Use one of: {', '.join(sorted(ROLES))}, or a custom role of the project "
                                 f"(projects/{self.project}/roles/ID).")
        if ":" not in member:
            raise SpecError(f"--member {member!r}: a member is TYPE:ID",
                            hint="e.g. user:owner@example.com or serviceAccount:NAME@PROJECT.iam.gserviceaccount.com.")
        with self._lock:
            members = self._policy.bindings.setdefault(role, [])
            if member not in members:
                members.append(member)
            self._policy.version += 1
            self._changed()

    def revoke(self, role: str, member: str) -> None:
        with self._lock:
            members = self._policy.bindings.get(role, [])
            if member in members:
                members.remove(member)
            if not members:
                self._policy.bindings.pop(role, None)
            self._policy.version += 1
            self._changed()

    def enable(self, service: str) -> None:
        if not service.endswith(".googleapis.com"):
            raise SpecError(f"--enable {service!r}: a service is named NAME.googleapis.com",
                            hint="e.g. --enable tpu.googleapis.com.")
        with self._lock:
            if service not in self._policy.services:
                self._policy.services = sorted({*self._policy.services, service})
            self._changed()
