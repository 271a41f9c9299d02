"""What the user's machine checks and grants before it makes a cluster's controller VM
(`controller.local: false`): the same checks as a local `up` (`preflight.py`: the APIs, the
caller's permissions in one call, the network and the buckets), and the cluster's own two
service accounts made and granted what each machine calls (`cloud/gcp/cluster_accounts.py`,
docs/permissions.md), all before anything bills.

The controller VM's own `up` gets the spec back naming the VMs' account, so it neither asks the
permissions again nor makes an account: its account holds only what it calls. A spec naming an
account of the user's (`network.service_account`) runs both machines as it, as before:
nothing is made or granted on the project.
"""

from __future__ import annotations

from typing import Any, Callable

from podmanager.cloud.gcp.cluster_accounts import (
    CONTROLLER,
    ON_BUCKETS,
    ON_PROJECT,
    ON_VMS_ACCOUNT,
    REPLACED_ON_BUCKETS,
    REPLACED_PROJECT_ROLES,
    VMS,
    account_id,
    accounts_for,
    controller_role,
    ensure_controller_roles,
    with_vms_account,
)
from podmanager.cloud.gcp.project_roles import take_back
from podmanager.cluster.bucket_preflight import BucketCheck, bucket_needs
from podmanager.cluster.permission_preflight import needed_permissions, refuse_missing
from podmanager.cluster.preflight import check_network, needed_apis, refuse_disabled
from podmanager.core.events import EventKind
from podmanager.core.spec import ClusterSpec

Record = Callable[..., Any]


def before_controller_vm(spec: ClusterSpec, raw: dict[str, Any], record: Record) -> tuple[ClusterSpec, dict[str, Any]]:
    """The checks and grants of the module's docstring; the spec (and its fields as the user
    wrote them, which the controller gets) naming the VMs' account when podmanager made it.
    SpecError (exit 2) naming every API, permission or network problem, nothing created."""
    from podmanager.cluster import backends

    backends.secrets_host(spec)  # a dry run's emulator started: `up` may be the project's first command
    accounts = accounts_for(spec)
    usage = backends.make_service_usage(spec)
    if usage is not None:
        with usage:
            refuse_disabled(spec, usage.disabled(needed_apis(spec, vms_boot=True)))
    iam = backends.make_project_iam(spec)
    if iam is None:  # no IAM to ask (TPU_EMULATOR_HOST): as before, the accounts the spec names
        return spec, raw
    with iam:
        if accounts.check_caller:
            refuse_missing(spec, iam.missing(needed_permissions(spec, vms_boot=True, makes_account=accounts.to_make,
                                                                 controller_vm=True)), iam.caller)
    if not accounts.to_make:
        return spec, raw
    filled = with_vms_account(spec, accounts.vms)
    buckets = backends.make_buckets(filled)
    needs = bucket_needs(filled, vms_boot=True)
    check = BucketCheck(filled, buckets, f"serviceAccount:{accounts.vms}", needs) if buckets and needs else None

    def make_accounts() -> None:
        _make_accounts(filled, record)
        if check is not None:  # the controller's `up` reads each bucket and its policy, and the wheel
            grant_on_buckets(filled, check.buckets, [need.bucket for need in needs],
                             f"serviceAccount:{accounts.controller}", record)

    compute = backends.make_compute(filled)
    try:
        if compute is None:
            make_accounts()
            if check is not None:
                check.grant(record)
        else:
            with compute:
                check_network(filled, compute, record=record, buckets=check, before_changes=make_accounts)
    finally:
        if buckets is not None:
            buckets.close()
    network = dict(raw.get("network") or {})
    return filled, {**raw, "network": {**network, "service_account": accounts.vms}}


def grant_on_buckets(spec: ClusterSpec, buckets: Any, names: list[str], controller: str, record: Record) -> None:
    """On each bucket the cluster's `controller_buckets` role granted to `controller`, and the
    predefined roles an earlier podmanager granted it there taken back (`cluster_accounts.py`)."""
    role = controller_role(spec.project or "", spec.name, ON_BUCKETS)
    for bucket in names:
        if buckets.bind(bucket, [(role, controller)]):
            record(EventKind.SERVICE_ACCOUNT_GRANTED, f"{controller} granted {role} on bucket {bucket}")
        for old, _member in buckets.unbind(bucket, [(old, controller) for old in REPLACED_ON_BUCKETS]):
            record(EventKind.SERVICE_ACCOUNT_GRANTED,
                   f"{controller} no longer granted {old} on bucket {bucket}: {role} replaces it")


def _make_accounts(spec: ClusterSpec, record: Record) -> None:
    """Both accounts made (unless there) and the controller's granted its custom role on the
    project (made or brought up to date first) and actAs on the VMs' account alone."""
    from podmanager.cluster import backends

    iam = backends.make_project_iam(spec)
    if iam is None:
        return
    with iam:
        emails = {}
        for role, what in ((VMS, "TPU VMs"), (CONTROLLER, "controller VM")):
            email, made = iam.ensure_account(account_id(spec.name, role), f"podmanager {spec.name}: {what}")
            emails[role] = email
            if made:
                record(EventKind.SERVICE_ACCOUNT_CREATED, f"service account {email} created: the {what} run as it")
        controller = f"serviceAccount:{emails[CONTROLLER]}"
        for custom, done in ensure_controller_roles(iam, spec.name):
            if done is not None:
                record(EventKind.SERVICE_ACCOUNT_GRANTED, f"custom role {custom} {done}: what the controller VM calls")
        added = iam.grant([(controller_role(iam.project, spec.name, ON_PROJECT), controller)])
        added += iam.grant_on_account(emails[VMS], [(role, controller) for role in ON_VMS_ACCOUNT[CONTROLLER]])
        taken = take_back(iam, [(role, controller) for role in REPLACED_PROJECT_ROLES])
    for role, member in added:
        record(EventKind.SERVICE_ACCOUNT_GRANTED, f"{member} granted {role}")
    for role, member in taken:
        record(EventKind.SERVICE_ACCOUNT_GRANTED, f"{member} no longer granted {role}: its custom role replaces it")
