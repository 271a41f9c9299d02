"""The buckets' preflight of `up`: the stage and checkpoint buckets exist and the TPU VMs' service
account may read (stage) and read and write (checkpoints) them, granted by `up` where it may,
else named with the command that grants it; a failure is a SpecError (exit 2) with nothing
created. Through the real REST client against the emulator's Cloud Storage bucket calls and
Compute Engine (the project's default service account), served in-process."""

from __future__ import annotations

import pytest

from podmanager.cloud.buckets import READER_ROLE, WRITER_ROLE, Binding
from podmanager.cloud.gcp.compute import ComputeNetworks
from podmanager.cloud.gcp.storage import BucketIam
from podmanager.cluster.bucket_preflight import BucketCheck, bucket_needs
from podmanager.cluster.preflight import check_network
from podmanager.core.errors import SpecError
from podmanager.core.spec import parse_spec
from podmanager.emulator.server import Emulator
from podmanager.emulator.sim.cloud import SIMULATED_PROJECT_NUMBER

PROJECT = "podmanager-sim"
STAGE = f"{PROJECT}-podmanager"  # the emulator's new project has it (a dry run's stage bucket)
VMS = f"serviceAccount:{SIMULATED_PROJECT_NUMBER}-compute@developer.gserviceaccount.com"


@pytest.fixture
def emulator():
    served = Emulator(PROJECT, persist=False)
    served.serve_rest()
    yield served
    served.stop()


@pytest.fixture
def root(emulator):
    return f"http://127.0.0.1:{emulator.rest_port}"


@pytest.fixture
def compute(root):
    with ComputeNetworks(PROJECT, endpoint=root, retry_deadline_s=5, retry_initial_s=0.05,
                         poll_interval_s=0.05) as client:
        yield client


@pytest.fixture
def buckets(root):
    with BucketIam(endpoint=root, retry_delay_s=0.01) as client:
        yield client


def spec(**fields):
    return parse_spec({"name": "c", "slices": [{"accelerator": "v4-8"}], **fields}, dry_run=True)


def check(cluster_spec, compute, buckets, events=None):
    needs = bucket_needs(cluster_spec, vms_boot=True)
    member = f"serviceAccount:{compute.default_service_account()}"
    record = lambda kind, message, **data: (events if events is not None else []).append((kind, message))  # noqa: E731
    check_network(cluster_spec, compute, record=record, buckets=BucketCheck(cluster_spec, buckets, member, needs))


def members(buckets, bucket, role):
    return sorted(m for b in buckets.policy(bucket).bindings if b.role == role for m in b.members)


def firewall_inserts(emulator):
    return emulator.api.requests_of("compute.firewalls.insert")


def test_the_stage_bucket_is_read_and_the_checkpoint_bucket_written_by_what_each_spec_names():
    assert [(n.bucket, n.write, n.field) for n in bucket_needs(spec(), vms_boot=True)] == [(STAGE, False, "boot.stage")]
    assert bucket_needs(spec(), vms_boot=False) == []  # no VM boots: nothing is staged
    with_checkpoints = spec(checkpoints="gs://ckpt/runs")
    assert [(n.bucket, n.write, n.field) for n in bucket_needs(with_checkpoints, vms_boot=True)] == [
        ("ckpt", True, "checkpoints")]  # the wheel is staged beside the checkpoints: one bucket, written
    assert [(n.bucket, n.write) for n in bucket_needs(spec(boot={"podmanager": "0.1.0"}), vms_boot=True)] == []


def test_a_default_spec_passes_and_the_vms_account_is_granted_read_once(emulator, compute, buckets):
    events = []
    check(spec(), compute, buckets, events)
    check(spec(), compute, buckets, events)  # a second `up`: granted already

    assert members(buckets, STAGE, READER_ROLE) == [VMS]  # the project's default compute account
    assert [kind for kind, _ in events] == ["bucket_granted", "firewall_created"]
    assert emulator.api.requests_of("compute.projects.get")


def test_the_specs_service_account_is_granted_read_and_write_on_the_checkpoint_bucket(emulator, compute, buckets):
    emulator.sim.create_bucket("ckpt")
    account = "tpu-vms@podmanager-sim.iam.gserviceaccount.com"
    cluster_spec = spec(checkpoints="gs://ckpt/runs", network={"service_account": account})
    needs = bucket_needs(cluster_spec, vms_boot=True)

    check_network(cluster_spec, compute, record=lambda *a, **k: None,
                  buckets=BucketCheck(cluster_spec, buckets, f"serviceAccount:{account}", needs))

    assert members(buckets, "ckpt", WRITER_ROLE) == [f"serviceAccount:{account}"]
    assert buckets.policy("ckpt").allows(f"serviceAccount:{account}", write=True)


def test_a_missing_checkpoint_bucket_is_named_with_the_command_that_makes_it_and_nothing_is_created(
        emulator, compute, buckets):
    with pytest.raises(SpecError) as refused:
        check(spec(checkpoints="gs://no-such-bucket/runs"), compute, buckets)

    message = str(refused.value)
    assert refused.value.exit_code == 2 and "nothing was created" in message
    assert "checkpoints: bucket no-such-bucket does not exist" in message
    assert "gcloud storage buckets create gs://no-such-bucket --project podmanager-sim" in message
    assert firewall_inserts(emulator) == []


def test_a_bucket_the_vms_may_not_read_and_up_may_not_grant_is_named_and_nothing_is_created(
        emulator, compute, buckets):
    emulator.sim.deny_bucket_iam_changes()
    before = buckets.policy(STAGE)

    with pytest.raises(SpecError) as refused:
        check(spec(), compute, buckets)

    message = str(refused.value)
    assert refused.value.exit_code == 2 and "nothing was created" in message
    assert f"boot.stage: the TPU VMs' service account ({VMS}) may not read bucket {STAGE}" in message
    assert f"gcloud storage buckets add-iam-policy-binding gs://{STAGE} --member {VMS} --role {READER_ROLE}" in message
    assert buckets.policy(STAGE) == before and firewall_inserts(emulator) == []

    # A grant made by its owner will do, though `up` may still not change the policy.
    with emulator.sim.storage() as storage:
        storage.state.buckets[STAGE] = before.granting(VMS, READER_ROLE)
    check(spec(), compute, buckets)
    assert len(firewall_inserts(emulator)) == 1


def test_other_bindings_are_kept_and_a_conditional_one_is_not_taken_for_access(emulator, compute, buckets):
    emulator.sim.create_bucket("ckpt")
    expiring = Binding(role=WRITER_ROLE, members=[VMS], condition={"title": "until friday", "expression": "false"})
    with emulator.sim.storage() as storage:
        policy = storage.bucket("ckpt")
        storage.state.buckets["ckpt"] = policy.model_copy(update={"bindings": [
            *policy.bindings, expiring, Binding(role="roles/storage.admin", members=["group:ops@example.com"])]})

    check(spec(checkpoints="gs://ckpt/runs"), compute, buckets)

    bindings = buckets.policy("ckpt").bindings
    assert expiring in bindings and Binding(role="roles/storage.admin", members=["group:ops@example.com"]) in bindings
    assert Binding(role=WRITER_ROLE, members=[VMS]) in bindings


def test_a_policy_changed_between_read_and_write_is_read_again_not_overwritten(emulator, buckets):
    rival = "user:rival@example.com"
    real_policy = buckets.policy
    raced = []

    def policy_then_a_rival_writes(bucket):
        read = real_policy(bucket)
        if not raced:
            raced.append(True)
            with emulator.sim.storage() as storage:
                storage.set_policy(bucket, read.granting(rival, READER_ROLE))
        return read

    buckets.policy = policy_then_a_rival_writes
    assert buckets.grant(STAGE, VMS, READER_ROLE, write=False)

    buckets.policy = real_policy
    assert members(buckets, STAGE, READER_ROLE) == sorted([rival, VMS])
