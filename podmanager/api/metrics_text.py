"""A cluster's figures in Prometheus's text format (`/metrics` at the page's address): where the
runs' seconds went by bucket, the incidents and how long each took to detect and recover, the
slices by state and role, the hosts by health, and each service's requests, failures and latency.

Names and labels follow Prometheus's conventions (https://prometheus.io/docs/practices/naming/):
the `podmanager_` prefix, base units (seconds), `_total` on counters, histograms with `_bucket`,
`_sum` and `_count`. A run is no label (a thousand runs would be a thousand series per figure):
the runs' figures are summed per cluster, as a dashboard graphs them."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from podmanager.channel.cluster_status import ClusterStatus
from podmanager.state.run_records import RunRecord
from podmanager.state.run_timeline import BUCKETS, INCIDENT_KINDS, of_record
from podmanager.state.services import ServiceRecord

# Seconds: a detection takes from well under a second (a notice) to minutes (a hang); a recovery
# from seconds (a hot spare) to most of an hour (a slice made again in a busy zone).
DETECT_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
RECOVER_BUCKETS = (1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 3600)


@dataclass
class MetricsInput:
    cluster: str
    runs: list[RunRecord]
    status: ClusterStatus | None = None  # None: the cluster is down (no slice or host figures)
    services: list[ServiceRecord] = field(default_factory=list)


def prometheus_text(given: MetricsInput, *, now: float) -> str:
    out = _Writer(given.cluster)
    seconds: dict[str, float] = dict.fromkeys(BUCKETS, 0.0)
    detect: dict[str, list[float]] = defaultdict(list)
    recover: dict[str, list[float]] = defaultdict(list)
    incidents: Counter[str] = Counter()
    by_status: Counter[str] = Counter()
    lost_steps = 0
    for run in given.runs:
        by_status[run.status] += 1
        timeline = of_record(run, [], now=now)
        for bucket in timeline.buckets:
            seconds[bucket.name] += bucket.seconds
        for incident in timeline.incidents:
            incidents[incident.kind] += 1
            lost_steps += incident.lost_steps or 0
            if incident.detect_s is not None:
                detect[incident.kind].append(incident.detect_s)
            if incident.recover_s is not None:
                recover[incident.kind].append(incident.recover_s)

    out.family("podmanager_run_seconds_total", "counter",
               "Seconds of the cluster's runs (first setup to end, or to now), by where they went.")
    for name, value in seconds.items():
        out.sample("podmanager_run_seconds_total", value, bucket=name)
    wall = sum(seconds.values())
    out.family("podmanager_goodput_ratio", "gauge", "Productive step seconds over all the runs' seconds.")
    out.sample("podmanager_goodput_ratio", seconds["productive"] / wall if wall > 0 else 0.0)
    out.family("podmanager_runs", "gauge", "Runs by status.")
    for status in ("starting", "running", "recovering", "succeeded", "failed", "cancelled"):
        out.sample("podmanager_runs", by_status.get(status, 0), status=status)
    kinds = sorted(set(INCIDENT_KINDS.values()))
    out.family("podmanager_incidents_total", "counter", "Incidents of the runs, by kind.")
    for kind in kinds:
        out.sample("podmanager_incidents_total", incidents.get(kind, 0), kind=kind)
    out.family("podmanager_lost_steps_total", "counter", "Steps done again after an incident.")
    out.sample("podmanager_lost_steps_total", lost_steps)
    out.histogram("podmanager_incident_detect_seconds", "From the last healthy check to the incident's detection.",
                  DETECT_BUCKETS, detect, kinds)
    out.histogram("podmanager_incident_recover_seconds", "From an incident's detection to the next attempt's first step.",
                  RECOVER_BUCKETS, recover, kinds)

    status = given.status
    if status is not None:
        slices: Counter[tuple[str, str]] = Counter((s.state, "spare" if s.spare else "work") for s in status.slices)
        out.family("podmanager_slices", "gauge", "Slices by state and role (work or spare).")
        for (state, role), count in sorted(slices.items()):
            out.sample("podmanager_slices", count, state=state, role=role)
        hosts: Counter[str] = Counter(h.state for h in status.hosts)
        out.family("podmanager_hosts", "gauge", "Hosts by their agent's health (controller/host_info.py's states).")
        for health, count in sorted(hosts.items()):
            out.sample("podmanager_hosts", count, health=health)

    counters = [("requests", "Requests the service's router received."),
                ("served", "Requests answered."),
                ("failed", "Requests the service failed (lost on two replicas)."),
                ("rejected", "Requests refused after the queue timeout (no replica ready)."),
                ("errors", "Requests the program raised on.")]
    for name, help_text in counters:
        metric = f"podmanager_service_{name}_total" if name == "requests" else f"podmanager_service_requests_{name}_total"
        out.family(metric, "counter", help_text)
        for service in given.services:
            out.sample(metric, getattr(service.counters, name), service=service.service_id)
    out.family("podmanager_service_latency_seconds", "gauge", "The router's latency over its last answers, by quantile.")
    for service in given.services:
        for quantile, value in (("0.5", service.counters.p50_ms), ("0.99", service.counters.p99_ms)):
            if value is not None:
                out.sample("podmanager_service_latency_seconds", value / 1000, service=service.service_id,
                           quantile=quantile)
    out.family("podmanager_service_replicas_ready", "gauge", "Replicas ready to serve.")
    for service in given.services:
        ready = sum(1 for r in service.counters.replicas if r.state == "ready")
        out.sample("podmanager_service_replicas_ready", ready, service=service.service_id)
    return out.text()


class _Writer:
    def __init__(self, cluster: str):
        self.cluster = cluster
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> None:
        self.lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]

    def sample(self, name: str, value: float, **labels: str) -> None:
        pairs = {"cluster": self.cluster, **labels}
        text = ",".join(f'{k}="{_escape(str(v))}"' for k, v in pairs.items())
        self.lines.append(f"{name}{{{text}}} {_number(value)}")

    def histogram(self, name: str, help_text: str, bounds: tuple[float, ...], values: dict[str, list[float]],
                  kinds: list[str]) -> None:
        self.family(name, "histogram", help_text)
        for kind in kinds:
            seen = values.get(kind, [])
            for bound in bounds:
                self.sample(f"{name}_bucket", sum(1 for v in seen if v <= bound), kind=kind, le=repr(float(bound)))
            self.sample(f"{name}_bucket", len(seen), kind=kind, le="+Inf")
            self.sample(f"{name}_sum", sum(seen), kind=kind)
            self.sample(f"{name}_count", len(seen), kind=kind)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    return repr(float(value)) if isinstance(value, float) else str(value)
