"""How often podmanager looks and how long it waits, one record per mode.

A dry run's cloud is a local emulator: it answers in milliseconds, its operations take
`simulation.create_latency_s`, and nobody is billed for a read. Google Cloud answers in
seconds, meters reads against quotas, and runs on a real network. Only the timings that
differ between the two are here; one that is the same in both modes stays beside its code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from podmanager.core.spec import ClusterSpec


@dataclass(frozen=True)
class ApiTiming:
    """One Google API client's timing; the field names are the client's own parameters."""

    call_timeout_s: float  # one call's deadline
    retry_deadline_s: float  # how long a transient error is retried
    retry_initial_s: float  # the first backoff, doubling ...
    retry_max_s: float  # ... up to this
    poll_interval_s: float  # how often a long-running operation is asked whether it is done


@dataclass(frozen=True)
class RayHealthChecks:
    """How fast the Ray head's GCS declares a silent node dead (the head's system config,
    which every worker node takes from the GCS)."""

    period_ms: int
    failure_threshold: int  # misses in a row
    timeout_ms: int  # one check's deadline

    def system_config(self) -> dict[str, int]:
        return {"health_check_period_ms": self.period_ms, "health_check_failure_threshold": self.failure_threshold,
                "health_check_timeout_ms": self.timeout_ms}


@dataclass(frozen=True)
class Cadence:
    converge_poll_s: float  # `up`, a recovery and `down` list the cloud again this often while converging
    metadata_poll_s: float  # an update of the slices' metadata (a new head's address) is asked after this often
    boot_poll_s: float  # while `up` waits for hosts: each node's boot stages (guest attributes) read this often
    cloud_view_period_s: float  # the monitor lists the slices for `status` (and keeps spares) once a period
    tpu_api: ApiTiming  # the Cloud TPU client
    compute_api: ApiTiming  # the Compute Engine client (the network's preflight, the firewall rule)
    ray_health: RayHealthChecks

    @staticmethod
    def for_spec(spec: ClusterSpec) -> Cadence:
        return Cadence.for_mode(simulated=spec.simulated)

    @staticmethod
    def for_mode(*, simulated: bool) -> Cadence:
        return SIMULATED if simulated else GOOGLE_CLOUD


SIMULATED = Cadence(
    # The emulator answers at once and an operation lasts `simulation.create_latency_s`: a
    # dry run waits no longer than it must.
    converge_poll_s=0.05,
    metadata_poll_s=0.05,
    boot_poll_s=0.5,  # a simulated VM's stages move in seconds; each read is one call to the emulator
    cloud_view_period_s=1.0,  # `status` sees a fault injected a moment ago
    # A restarted emulator is back within a second: retry fast, give up within a minute.
    tpu_api=ApiTiming(call_timeout_s=30.0, retry_deadline_s=60.0, retry_initial_s=0.05, retry_max_s=0.5,
                      poll_interval_s=0.05),
    compute_api=ApiTiming(call_timeout_s=30.0, retry_deadline_s=60.0, retry_initial_s=0.05, retry_max_s=0.5,
                          poll_interval_s=0.05),
    # Simulated hosts share this machine's loopback, where no healthy node misses a check:
    # 3 misses of a 0.5 s check, a killed host dead in ~1.5 s.
    ray_health=RayHealthChecks(period_ms=500, failure_threshold=3, timeout_ms=500),
)

GOOGLE_CLOUD = Cadence(
    # A slice takes minutes to create and every list is a metered read against the
    # project's quota: a few seconds between looks costs nothing in time.
    converge_poll_s=5.0,
    metadata_poll_s=2.0,  # a metadata update is done in seconds
    boot_poll_s=5.0,  # the real API has read quotas
    cloud_view_period_s=10.0,  # one list of the zones per period, for as long as the cluster is up
    # The client libraries' own pace (and `GcpCloud`'s, `ComputeNetworks`' defaults).
    tpu_api=ApiTiming(call_timeout_s=30.0, retry_deadline_s=120.0, retry_initial_s=1.0, retry_max_s=30.0,
                      poll_interval_s=5.0),
    compute_api=ApiTiming(call_timeout_s=30.0, retry_deadline_s=60.0, retry_initial_s=1.0, retry_max_s=10.0,
                          poll_interval_s=1.0),
    # TPU VMs on a real network (GC pauses, a busy host, a network blip) keep Ray's own
    # defaults: 5 misses of a check every 3 s, each allowed 10 s. A host whose process died is
    # dead in ~15 s; one that stopped answering (frozen, cut off) in up to ~1 min. A healthy
    # slice must never be deleted for a pause: a false alarm costs a whole slice and a restart.
    ray_health=RayHealthChecks(period_ms=3000, failure_threshold=5, timeout_ms=10000),
)
