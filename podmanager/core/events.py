"""Every kind of event podmanager records in a cluster's event log.

The store's writer takes only these members, so a misspelt kind fails where it is written
instead of silently missing every filter. The values are the strings the log has always
held: old logs read the same. A `StrEnum`, so a member prints and compares as its value.
"""

from __future__ import annotations

from enum import StrEnum


class EventKind(StrEnum):
    # up: the plan, the slices, the head, the hosts
    UP = "up"
    UP_PLAN = "up_plan"
    WAITING = "waiting"  # for the cluster's lock
    RETRY = "retry"  # a cloud call failed transiently and is tried again
    FIREWALL_CREATED = "firewall_created"
    FIREWALL_EXISTING = "firewall_existing"
    BUCKET_GRANTED = "bucket_granted"  # the VMs' account given access to a bucket they use
    SERVICE_ACCOUNT_CREATED = "service_account_created"  # the cluster's own account, made by `up`
    SERVICE_ACCOUNT_GRANTED = "service_account_granted"  # a role granted to it on the project or an account
    # the controller VM (`controller.local: false`), as the user's machine makes and removes it
    CONTROLLER_PLAN = "controller_plan"  # create it, keep the one there, or change that one in place
    CONTROLLER_CREATING = "controller_creating"
    CONTROLLER_CHANGING = "controller_changing"  # upgraded or resized in place, its boot disk kept
    CONTROLLER_BOOT = "controller_boot"
    CONTROLLER_READY = "controller_ready"
    CONTROLLER_DELETED = "controller_deleted"
    HISTORY_KEPT = "history_kept"  # the cluster's records copied to the user's machine before its controller VM goes
    SLICE_CREATING = "slice_creating"
    SLICE_QUEUED = "slice_queued"
    SLICE_WAITING = "slice_waiting"
    SLICE_READY = "slice_ready"
    SLICE_PREEMPTED = "slice_preempted"
    SLICE_REPAIRING = "slice_repairing"
    SLICE_REPAIRED = "slice_repaired"
    SLICE_DELETING = "slice_deleting"
    SLICE_DELETED = "slice_deleted"
    QUEUED_RESOURCE_DELETING = "queued_resource_deleting"
    ZONE_FALLBACK = "zone_fallback"
    SLICES_READY = "slices_ready"
    SLICES_KEPT = "slices_kept"
    HEAD_STARTING = "head_starting"
    HEAD_READY = "head_ready"
    METADATA_UPDATE = "metadata_update"
    HOSTS_JOINING = "hosts_joining"
    HOST_BOOT = "host_boot"
    HOST_BOOT_FAILED = "host_boot_failed"
    HOSTS_JOINED = "hosts_joined"
    # hot spares, kept by the cluster's monitor
    SPARE_UPKEEP = "spare_upkeep"
    SPARE_READY = "spare_ready"
    # down
    DOWN = "down"
    STRAYS_STOPPED = "strays_stopped"
    CLUSTER_DELETED = "cluster_deleted"
    FIREWALL_DELETED = "firewall_deleted"
    FIREWALL_LEFT = "firewall_left"
    EMULATOR_STOPPED = "emulator_stopped"
    STATE_REBUILT = "state_rebuilt"
    # a run, from its submit to its end
    RUN_SUBMITTED = "run_submitted"
    RUN_NOT_STARTED = "run_not_started"
    WARNING = "warning"
    RUN_STARTED = "run_started"
    SUPERVISOR_RESTARTING = "supervisor_restarting"
    SUPERVISOR_RESTARTED = "supervisor_restarted"
    SETUP_STARTED = "setup_started"
    SETUP_PROGRESS = "setup_progress"
    SETUP_DONE = "setup_done"
    SETUP_FAILED = "setup_failed"
    ATTEMPT_STARTED = "attempt_started"
    REATTACHED = "reattached"
    PREEMPTION_NOTICE = "preemption_notice"
    SLICE_UNWELL = "slice_unwell"
    INCIDENT = "incident"
    BACKOFF = "backoff"
    SPARE_SWAPPED = "spare_swapped"
    SPARE_PREPARED = "spare_prepared"  # a run's code and requirements set up ahead on a hot spare
    RUN_SHRUNK = "run_shrunk"  # an elastic run goes on with the slices left while a lost one is made again
    RUN_GREW = "run_grew"  # ... and back on all its slices once it is ready
    CHECKPOINT_SAVED = "checkpoint_saved"  # the program said a checkpoint is final (the timeline marks it)
    HEALING = "healing"
    SLICES_DELETED = "slices_deleted"
    SLICES_REPLACED = "slices_replaced"
    RESUMED = "resumed"
    CANCELLING = "cancelling"
    CANCEL_TIMEOUT = "cancel_timeout"
    RUN_CANCELLED = "run_cancelled"
    RUN_FAILED = "run_failed"
    RUN_SUCCEEDED = "run_succeeded"
    # services
    SERVICE_STARTING = "service_starting"
    SERVICE_CANCELLED = "service_cancelled"
    # dry runs: the simulated faults
    FAULT_INJECTED = "fault_injected"
    FAULT_ARMED = "fault_armed"
