"""One cluster's history copied out of the state store (state/history_copy.py): its events, runs,
services and request history, no other cluster's, and no secret."""

from __future__ import annotations

import pytest
from dashboard_records import CLUSTER, preempted_run

from podmanager.core.events import EventKind
from podmanager.core.spec import parse_spec
from podmanager.core.workload import Workload
from podmanager.state import StateStore, run_secrets, service_tokens
from podmanager.state.history_copy import copy_history
from podmanager.state.run_records import RunRecord, RunStore
from podmanager.state.service_history import Point, ServiceHistory
from podmanager.state.services import ServiceRecord, ServiceStore


def test_the_copy_holds_the_clusters_records_only_and_no_secret(tmp_path):
    store = StateStore()
    store.save_cluster(CLUSTER, parse_spec({"name": CLUSTER, "project": "spec-sentinel-1234", "backend": "simulated",
                                         "slices": [{"accelerator": "v4-8"}]}), "up")
    preempted_run(store=store)
    run_secrets.save(CLUSTER, "r1", {"API_KEY": "secret-sentinel-5678"})
    store.save_cluster("other", parse_spec({"name": "other", "backend": "simulated", "slices": [{"accelerator": "v4-8"}]}), "up")
    store.add_event("other", EventKind.SLICE_READY, "another cluster's slice", slice_index=0)
    RunStore().create(RunRecord("o1", "other", Workload(command=["x"]), [0], {}, None))
    for cluster, service in ((CLUSTER, "s1"), ("other", "s2")):
        ServiceStore().create(ServiceRecord(service_id=service, cluster=cluster, program="p", slices=[0],
                                            endpoint="http://x", replica_url="ws://x"))
        ServiceHistory().add(cluster, service, Point(1000.0, 1.0, 4, 0, 1.0, 2.0, 1))
    token = service_tokens.create(CLUSTER, "s1")

    copy = tmp_path / "copy.db"
    copy_history(store.path, CLUSTER, copy)
    kept = StateStore(copy)
    assert [e.kind for e in kept.events(CLUSTER)] == ["preemption_notice", "spare_swapped"]
    assert kept.events("other") == [] and kept.get_cluster("other") is None
    assert kept.get_cluster(CLUSTER).stored_spec is None and kept.get_cluster(CLUSTER).status == "up"
    assert [r.run_id for r in RunStore(copy).list()] == ["r1"]
    assert RunStore(copy).get("r1").result.wall_s == 44.0
    assert [s.service_id for s in ServiceStore(copy).list()] == ["s1"]
    assert ServiceHistory(copy).series("s1") and ServiceHistory(copy).series("s2") == []
    written = b"".join(p.read_bytes() for p in tmp_path.glob("copy.db*"))
    for secret in (b"spec-sentinel-1234", b"secret-sentinel-5678", token.encode()):
        assert secret not in written
    with pytest.raises(FileExistsError):  # never written over
        copy_history(store.path, CLUSTER, copy)
