"""The cluster's `/metrics`, parsed by prometheus_client's own parser: every family well formed,
and its values those of the records (the ledger's incidents, the runs' buckets, the slices,
hosts and services)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from dashboard_records import CLUSTER, preempted_run
from prometheus_client.parser import text_string_to_metric_families

from podmanager.api.metrics_text import MetricsInput, prometheus_text
from podmanager.channel.cluster_status import ClusterStatus, HostStatus, SliceStatus
from podmanager.state.run_records import RunStore
from podmanager.state.run_timeline import of_record
from podmanager.state.services import ServiceCounters, ServiceRecord


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def value(found: dict, name: str, **labels: str) -> float:
    return found[(name, frozenset({"cluster": CLUSTER, **labels}.items()))]


def status() -> ClusterStatus:
    slices = [SliceStatus(index=i, name=f"c-s{i}", accelerator="v5litepod-8", zone="z", state=state, hosts=1, chips=8,
                          spare=spare) for i, state, spare in ((0, "PREEMPTED", True), (1, "READY", False),
                                                               (2, "READY", False), (3, "READY", True))]
    hosts = [HostStatus(slice_index=i, node_name=f"c-s{i}", worker_id=0, ip=None, chips=8, healthy=state == "healthy",
                        last_heartbeat=None, ray_node_id=None, detail="", state=state)
             for i, state in ((1, "healthy"), (2, "healthy"), (3, "unreachable"))]
    return ClusterStatus(name=CLUSTER, backend="simulated", project="p", slices=slices, hosts=hosts)


def test_the_metrics_parse_and_equal_the_records():
    run = preempted_run("r1")
    other = preempted_run("r2", t0=2_000_000.0)
    service = ServiceRecord(service_id="svc-1", cluster=CLUSTER, program="serve.py", slices=[1], endpoint="http://x:1",
                            replica_url="ws://x:1/replica",
                            counters=ServiceCounters(requests=120, served=118, failed=0, rejected=2, errors=1,
                                                     p50_ms=4.0, p99_ms=30.0))
    text = prometheus_text(MetricsInput(cluster=CLUSTER, runs=RunStore().list(CLUSTER), status=status(),
                                        services=[service]), now=3_000_000.0)
    found = samples(text)

    incidents = [i for r in (run, other) for i in r.ledger.incidents]
    assert value(found, "podmanager_incidents_total", kind="preemption") == len(incidents) == 2
    assert value(found, "podmanager_incidents_total", kind="hang") == 0
    assert value(found, "podmanager_incident_detect_seconds_sum", kind="preemption") == sum(i.detect_s for i in incidents)
    assert value(found, "podmanager_incident_detect_seconds_count", kind="preemption") == 2
    assert value(found, "podmanager_incident_detect_seconds_bucket", kind="preemption", le="1.0") == 0
    assert value(found, "podmanager_incident_detect_seconds_bucket", kind="preemption", le="2.5") == 2
    assert value(found, "podmanager_incident_recover_seconds_sum", kind="preemption") == sum(i.recover_s for i in incidents)
    assert value(found, "podmanager_lost_steps_total") == sum(i.lost_steps for i in incidents)
    timelines = [of_record(r, [], now=0) for r in (run, other)]
    for bucket in ("productive", "lost", "waiting", "setup", "restore"):
        assert value(found, "podmanager_run_seconds_total", bucket=bucket) == pytest.approx(
            sum(t.bucket(bucket) for t in timelines))
    assert sum(v for (name, _), v in found.items() if name == "podmanager_run_seconds_total") == pytest.approx(
        sum(r.result.wall_s for r in (run, other)))
    assert value(found, "podmanager_runs", status="succeeded") == 2
    assert value(found, "podmanager_slices", state="READY", role="work") == 2
    assert value(found, "podmanager_slices", state="READY", role="spare") == 1
    assert value(found, "podmanager_slices", state="PREEMPTED", role="spare") == 1
    assert value(found, "podmanager_hosts", health="healthy") == 2
    assert value(found, "podmanager_hosts", health="unreachable") == 1
    assert value(found, "podmanager_service_requests_total", service="svc-1") == 120
    assert value(found, "podmanager_service_requests_failed_total", service="svc-1") == 0
    assert value(found, "podmanager_service_requests_rejected_total", service="svc-1") == 2
    assert value(found, "podmanager_service_latency_seconds", service="svc-1", quantile="0.99") == pytest.approx(0.03)


def test_a_cluster_that_is_down_still_has_its_runs_figures():
    preempted_run()
    found = samples(prometheus_text(MetricsInput(cluster=CLUSTER, runs=RunStore().list(CLUSTER)), now=3_000_000.0))
    assert value(found, "podmanager_incidents_total", kind="preemption") == 1
    assert not any(name == "podmanager_slices" for name, _ in found)


def test_the_grafana_dashboard_graphs_only_metrics_the_endpoint_serves():
    board = json.loads((Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json").read_text())
    asked = {name for panel in board["panels"] for target in panel["targets"]
             for name in re.findall(r"\b(podmanager_[a-z_]+)\{", target["expr"])}
    preempted_run()
    served = {sample.name for family in text_string_to_metric_families(prometheus_text(
        MetricsInput(cluster=CLUSTER, runs=RunStore().list(CLUSTER), status=status(), services=[ServiceRecord(
            service_id="s", cluster=CLUSTER, program="p", slices=[1], endpoint="http://x:1", replica_url="ws://x:1",
            counters=ServiceCounters(p50_ms=1.0, p99_ms=2.0))]), now=3_000_000.0)) for sample in family.samples}
    assert asked and asked <= served, asked - served
