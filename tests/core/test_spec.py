import re

import pytest

from podmanager.core.errors import SpecError
from podmanager.core.spec import (
    SIMULATED_PROJECT,
    Capacity,
    PodmanagerSource,
    load_spec,
    parse_spec,
)

SPEC = {"name": "c", "backend": "simulated", "slices": [{"accelerator": "v4-8"}]}

GOOD = {"name": "demo", "backend": "simulated", "slices": [{"accelerator": "v4-16", "count": 2}, {"accelerator": "v4-8"}]}


def test_good_spec_expands_slices_in_order():
    spec = parse_spec(GOOD)
    assert [(s.index, s.accelerator.name) for s in spec.slice_list()] == [(0, "v4-16"), (1, "v4-16"), (2, "v4-8")]
    assert spec.project == SIMULATED_PROJECT and spec.zones
    assert spec.slices[0].capacity is Capacity.ON_DEMAND


def test_project_falls_back_to_environment(monkeypatch):
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "from-env")
    spec = parse_spec({"name": "a", "zones": ["us-central2-b"], "slices": [{"accelerator": "v4-8"}]})
    assert spec.project == "from-env"
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT")
    monkeypatch.setenv("CLOUDSDK_CORE_PROJECT", "from-gcloud")
    assert parse_spec({"name": "a", "zones": ["z"], "slices": [{"accelerator": "v4-8"}]}).project == "from-gcloud"


def test_dry_run_forces_simulated_backend():
    spec = parse_spec({"name": "a", "slices": [{"accelerator": "v4-8"}]}, dry_run=True)
    assert spec.simulated


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"slices": [{"accelerator": "v4-16"}, {"accelerator": "v4-12"}]},
         "slices[1].accelerator: 'v4-12' is not a TPU type; did you mean v4-16? see 'podmanager accelerators'"),
        ({"name": "Demo"}, "name: 'Demo' must be"),
        ({"name": "a" * 31}, "name:"),
        ({"slices": []}, "slices:"),
        ({"slices": [{"accelerator": "v4-8", "count": 0}]}, "slices[0].count"),
        ({"slices": [{"accelerator": "v4-8", "capacity": "cheap"}]}, "slices[0].capacity"),
        ({"slices": [{"accelerator": "v4-8", "labels": {"podmanager-x": "y"}}]}, "'podmanager-' prefix is reserved"),
        ({"slices": [{"accelerator": "v4-8", "labels": {"Team": "x"}}]}, "slices[0].labels"),
        ({"zones": ["a", "a"]}, "lists a zone twice"),
        ({"colour": "red"}, "colour: unknown field"),
        ({"head": {"port": 70000}}, "head.port"),
        ({"simulation": {"faults": [{"kind": "preempt"}]}}, "simulation.faults[0]: a 'preempt' fault needs 'slice'"),
        ({"simulation": {"faults": [{"kind": "capacity"}]}}, "needs 'zone'"),
        ({"simulation": {"faults": [{"kind": "meteor"}]}}, "simulation.faults[0].kind"),
        ({"health": {"hang_timeout_s": -1}}, "health.hang_timeout_s"),
        ({"slices": [{"accelerator": "v4-8", "queued": True, "capacity": "spot", "reservation": "r"}]},
         "slices[0].reservation: a reservation serves only capacity: reserved, and this slice asks for capacity: "
         "spot; set capacity: reserved or remove reservation"),
        ({"slices": [{"accelerator": "v4-8", "reservation": "r"}]},
         "slices[0].reservation: the Cloud TPU API takes a reservation name only on a queued resource; add queued: true"),
        ({"slices": [{"accelerator": "v4-8", "queued": True, "reservation": "Bad Name"}]},
         "slices[0].reservation: 'Bad Name' is not a reservation name"),
        ({"network": {"network": "My_VPC"}},
         "network.network: 'My_VPC' is not a VPC network; use its name (e.g. my-vpc) or "
         "projects/PROJECT/global/networks/NAME"),
        ({"network": {"network": "projects/p/networks/n"}}, "network.network: 'projects/p/networks/n' is not a VPC"),
        ({"network": {"subnetwork": "projects/p/regions/us-central2/subnets/s"}},
         "network.subnetwork: 'projects/p/regions/us-central2/subnets/s' is not a subnetwork; use its name (e.g. "
         "my-subnet) or projects/PROJECT/regions/REGION/subnetworks/NAME"),
        ({"network": {"service_account": "tpu-vms"}},
         "network.service_account: 'tpu-vms' is not a service account's email; use e.g. "
         "tpu-vms@my-project.iam.gserviceaccount.com"),
        ({"network": {"scopes": ["cloud-platform"]}},
         "network.scopes: 'cloud-platform' is not an OAuth scope URL; use e.g. "
         "https://www.googleapis.com/auth/cloud-platform"),
        ({"network": {"tags": ["Ray-Head"]}}, "network.tags: 'Ray-Head' is not a network tag; tags are 1-63 lowercase"),
        ({"network": {"tags": ["ray-"]}}, "network.tags: 'ray-' is not a network tag"),
        ({"network": {"tags": ["a" * 64]}}, "is not a network tag"),
        ({"network": {"tags": ["ray", "ssh", "ray"]}}, "network.tags: ray listed more than once"),
        ({"network": {"enable_external_ip": True}}, "network.enable_external_ip: unknown field; did you mean "
                                                    "enable_external_ips?"),
        ({"network": {"enable_external_ips": "sometimes"}}, "network.enable_external_ips"),
        # Fields that become file or resource names (issue 34, item 4).
        ({"project": "../../../escape"}, "project: '../../../escape' is not a Google Cloud project id; an id is "
                                         "6-30 lowercase letters, digits or '-', starting with a letter"),
        ({"project": "short"}, "project: 'short' is not a Google Cloud project id"),
        ({"project": "my-project-"}, "project: 'my-project-' is not a Google Cloud project id"),
        ({"project": "1-starts-with-digit"}, "is not a Google Cloud project id"),
        ({"zones": ["../sim-zone-a"]}, "zones[0]: '../sim-zone-a' is not a zone name"),
        ({"zones": ["sim-zone-a", "us central"]}, "zones[1]: 'us central' is not a zone name"),
        ({"name": "demo\n"}, "name: 'demo\\n' must be"),
        ({"slices": [{"accelerator": "v4-8", "queued": True, "reservation": "projects/../locations/z/reservations/r"}]},
         "slices[0].reservation: 'projects/../locations/z/reservations/r' is not a reservation name"),
        ({"slices": [{"accelerator": "v4-8", "runtime_version": "../base"}]},
         "slices[0].runtime_version: '../base' is not a TPU software version"),
        ({"slices": [{"accelerator": "v4-8", "labels": {f"k{i}": "v" for i in range(63)}}]},
         "slices[0].labels: 63 labels; a Cloud TPU node takes at most 62"),
        ({"slices": [{"accelerator": "v4-8", "labels": {"team": "x" * 64}}]}, "slices[0].labels: label team="),
        ({"boot": {"stage": "gs://my-bucket/../../elsewhere"}}, "boot.stage: 'gs://my-bucket/../../elsewhere' has a "
                                                                "'.' or '..' segment"),
        ({"checkpoints": "gs://my-bucket/./ck"}, "checkpoints: 'gs://my-bucket/./ck' has a '.' or '..' segment"),
        ({"checkpoints": "gs://my-bucket/two words"}, "checkpoints: 'gs://my-bucket/two words' is not a URL of a folder"),
    ],
)
def test_bad_specs_name_the_field(change, expected):
    with pytest.raises(SpecError) as raised:
        parse_spec({**GOOD, **change})
    assert expected in str(raised.value)
    assert raised.value.exit_code == 2


def test_gcp_backend_needs_project_and_zones(monkeypatch):
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    monkeypatch.delenv("CLOUDSDK_CORE_PROJECT", raising=False)
    with pytest.raises(SpecError, match="project: no GCP project given"):
        parse_spec({"name": "a", "zones": ["z"], "slices": [{"accelerator": "v4-8"}]})
    with pytest.raises(SpecError, match="zones: list at least one zone"):
        parse_spec({"name": "a", "project": "my-project", "slices": [{"accelerator": "v4-8"}]})


def test_load_spec_errors_name_the_file(tmp_path):
    with pytest.raises(SpecError, match="--file: cannot read"):
        load_spec(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_spec(bad)
    listed = tmp_path / "list.yaml"
    listed.write_text("- a\n- b\n")
    with pytest.raises(SpecError, match="expected a mapping"):
        load_spec(listed)


def test_example_specs_are_valid():
    from pathlib import Path

    examples = sorted((Path(__file__).parents[2] / "infra" / "examples").glob("*.yaml"))
    assert examples
    for example in examples:
        assert load_spec(example, dry_run=True).slices


def test_a_reservation_means_reserved_capacity_and_reaches_the_request():
    from podmanager.provisioning.plan import desired_slices

    spec = parse_spec({**GOOD, "slices": [{"accelerator": "v4-8", "queued": True, "reservation": "my-res"},
                                         {"accelerator": "v4-8", "queued": True, "capacity": "reserved",
                                          "reservation": "projects/p/locations/z/reservations/other"}]})
    assert [s.capacity for s in spec.slices] == [Capacity.RESERVED, Capacity.RESERVED]
    assert [(d.request.reservation, d.request.capacity) for d in desired_slices(spec)] == [
        ("my-res", Capacity.RESERVED), ("projects/p/locations/z/reservations/other", Capacity.RESERVED)]


def test_queue_wait_s_is_for_queued_slices_and_reaches_the_plan():
    from podmanager.provisioning.plan import desired_slices

    spec = parse_spec({**GOOD, "slices": [{"accelerator": "v4-8", "queued": True, "queue_wait_s": 300}]})
    assert [d.queue_wait_s for d in desired_slices(spec)] == [300]
    with pytest.raises(SpecError, match=r"queue_wait_s.*add queued: true"):
        parse_spec({**GOOD, "slices": [{"accelerator": "v4-8", "queue_wait_s": 300}]})
    with pytest.raises(SpecError, match="queue_wait_s"):
        parse_spec({**GOOD, "slices": [{"accelerator": "v4-8", "queued": True, "queue_wait_s": -1}]})


GCP = {"name": "demo", "project": "my-project", "zones": ["us-central2-b", "us-central2-c"]}


@pytest.mark.parametrize(("accelerator", "runtime"), [
    ("v2-8", "tpu-ubuntu2204-base"), ("v3-32", "tpu-ubuntu2204-base"), ("v4-16", "tpu-ubuntu2204-base"),
    ("v5litepod-16", "v2-alpha-tpuv5-lite"), ("v5p-8", "v2-alpha-tpuv5"), ("v6e-8", "v2-alpha-tpuv6e"),
])
def test_the_runtime_version_defaults_to_the_accelerators_generation(accelerator, runtime):
    spec = parse_spec({**GCP, "slices": [{"accelerator": accelerator}]})
    assert spec.slices[0].runtime_version == runtime


def test_an_explicit_runtime_version_wins_and_reaches_the_request():
    from podmanager.provisioning.plan import desired_slices

    spec = parse_spec({**GCP, "slices": [{"accelerator": "v5litepod-8", "runtime_version": "tpu-ubuntu2204-base"},
                                         {"accelerator": "v5litepod-8"}]})
    assert [d.request.runtime_version for d in desired_slices(spec)] == ["tpu-ubuntu2204-base", "v2-alpha-tpuv5-lite"]
    # The stored spec holds what was chosen, so re-reading it (recovery, rebuild-state) keeps it.
    assert parse_spec(spec.model_dump(mode="json")) == spec


def test_network_defaults_work_in_a_new_project():
    spec = parse_spec({**GCP, "slices": [{"accelerator": "v4-8"}], "network": {}})
    network = spec.network
    assert network is not None
    assert (network.network, network.subnetwork, network.service_account, network.tags) == (None, None, None, [])
    assert network.enable_external_ips is True  # a new project's network has no NAT: external IPs, as gcloud gives
    assert network.scopes == ["https://www.googleapis.com/auth/cloud-platform"]
    assert parse_spec({**GCP, "slices": [{"accelerator": "v4-8"}]}).network is None


@pytest.mark.parametrize("form", ["default", "my-vpc", "projects/host-project/global/networks/my-vpc",
                                  "projects/123456789012/global/networks/my-vpc"])
def test_a_network_is_a_name_or_a_path(form):
    spec = parse_spec({**GCP, "slices": [{"accelerator": "v4-8"}], "network": {"network": form}})
    assert spec.network is not None and spec.network.network == form


def test_the_network_reaches_the_node_request_typed():
    from podmanager.cloud.base import NodeNetwork
    from podmanager.provisioning.plan import desired_slices

    spec = parse_spec({**GCP, "slices": [{"accelerator": "v4-8", "count": 2}], "network": {
        "network": "projects/host/global/networks/vpc", "subnetwork": "projects/host/regions/us-central2/subnetworks/s",
        "enable_external_ips": True, "service_account": "vms@my-project.iam.gserviceaccount.com", "tags": ["ray"]}})
    tag = f"pm-{spec.name}"  # the cluster's own, which its firewall rule names
    expected = NodeNetwork(network="projects/host/global/networks/vpc",
                           subnetwork="projects/host/regions/us-central2/subnetworks/s", enable_external_ips=True,
                           service_account="vms@my-project.iam.gserviceaccount.com",
                           scopes=("https://www.googleapis.com/auth/cloud-platform",), tags=("ray", tag))
    assert [d.request.network for d in desired_slices(spec)] == [expected, expected]
    # Without a network section a node still gets the default account with the cloud-platform
    # scope (an empty email is the API's word for the project's default compute account).
    without = parse_spec({**GCP, "slices": [{"accelerator": "v4-8"}]})
    assert [d.request.network for d in desired_slices(without)] == [NodeNetwork(
        enable_external_ips=True, scopes=("https://www.googleapis.com/auth/cloud-platform",), tags=(tag,))]


def test_a_subnetwork_path_must_be_in_every_zones_region():
    subnet = {"subnetwork": "projects/p/regions/us-central2/subnetworks/s"}
    with pytest.raises(SpecError) as raised:
        parse_spec({**GCP, "zones": ["us-central2-b", "europe-west4-a"], "slices": [{"accelerator": "v4-8"}],
                    "network": subnet})
    assert ("network.subnetwork: projects/p/regions/us-central2/subnetworks/s is in region us-central2, but zone(s) "
            "europe-west4-a are not") in str(raised.value)
    assert parse_spec({**GCP, "slices": [{"accelerator": "v4-8"}], "network": subnet}).network is not None
    # By name, a subnetwork of that name is looked up in each zone's region: no check here.
    assert parse_spec({**GCP, "zones": ["us-central2-b", "europe-west4-a"], "slices": [{"accelerator": "v4-8"}],
                       "network": {"subnetwork": "s"}}).network is not None


# ---------------------------------------------------------------------- boot: what the TPU VMs install

WHEEL = "podmanager-0.2.0+h0123456789-py3-none-any.whl"


@pytest.mark.parametrize("given, source, version", [
    (None, PodmanagerSource.BUILT, None),
    ("0.2.0", PodmanagerSource.VERSION, "0.2.0"),
    ("1.0rc1", PodmanagerSource.VERSION, "1.0rc1"),
    (f"https://wheels.example.com/w/{WHEEL}", PodmanagerSource.URL, "0.2.0+h0123456789"),
    ("gs://my-bucket/wheels/podmanager-0.3.1-py3-none-any.whl", PodmanagerSource.URL, "0.3.1"),
    (f"/home/me/dist/{WHEEL}", PodmanagerSource.LOCAL_WHEEL, "0.2.0+h0123456789"),  # staged like a built one
])
def test_boot_podmanager_is_a_version_a_wheel_url_or_a_wheel_here(given, source, version):
    spec = parse_spec({**GOOD, "boot": {} if given is None else {"podmanager": given}})
    assert (spec.boot.podmanager, spec.boot.source, spec.boot.podmanager_version()) == (given, source, version)


def test_boot_defaults_ship_the_running_podmanager_and_nothing_else():
    boot = parse_spec(GOOD).boot
    assert (boot.podmanager, boot.packages, boot.stage, boot.source) == (None, [], None, PodmanagerSource.BUILT)


def test_a_local_wheel_is_checked_for_its_form_only(tmp_path):
    # A stored spec is read again by later commands, after the file may be gone: whether it
    # exists is the upload's business (controller/staging.py).
    gone = tmp_path / "podmanager-0.2.0-py3-none-any.whl"
    assert parse_spec({**GOOD, "boot": {"podmanager": str(gone)}}).boot.podmanager == str(gone)


@pytest.mark.parametrize("boot, expected", [
    ({"podmanager": "/home/me/podmanager"},
     "boot.podmanager: '/home/me/podmanager' is no podmanager wheel (podmanager-VERSION-py3-none-any.whl); a TPU VM "
     "cannot read this machine's disk or install from a source tree"),
    ({"podmanager": "dist/podmanager-0.2.0-py3-none-any.whl"},
     "boot.podmanager: 'dist/podmanager-0.2.0-py3-none-any.whl' is neither a version (e.g. 0.2.0), a wheel's URL nor "
     "the absolute path of a wheel file on this machine (which up uploads to boot.stage for the TPU VMs)"),
    ({"podmanager": "podmanager==0.2.0"}, "boot.podmanager: 'podmanager==0.2.0': write the version alone, e.g. 0.2.0"),
    ({"podmanager": "file:///tmp/podmanager-0.2.0-py3-none-any.whl"},
     "boot.podmanager: 'file:///tmp/podmanager-0.2.0-py3-none-any.whl': give a wheel on this machine by its absolute "
     "path"),
    ({"podmanager": "s3://b/podmanager-0.2.0-py3-none-any.whl"},
     "boot.podmanager: 's3://b/podmanager-0.2.0-py3-none-any.whl': a TPU VM installs podmanager from an https://, "
     "http:// or gs:// URL of a wheel"),
    ({"podmanager": "gs://my-bucket"}, "boot.podmanager: 'gs://my-bucket' names no wheel file"),
    ({"podmanager": "https://example.com/other-1.0-py3-none-any.whl"}, "is no podmanager wheel"),
    ({"packages": ["optax==0.2.4", ""]}, "boot.packages[1]: an empty requirement; remove it"),
    ({"packages": ["optax\nflax"]}, "boot.packages[0]: 'optax\\nflax' spans lines; give one requirement per entry"),
    ({"packages": ["flax", "--index-url=https://evil.example"]},
     "boot.packages[1]: '--index-url=https://evil.example' is an installer option, not a requirement"),
    ({"packages": ["-r requirements.txt"]}, "boot.packages[0]: '-r requirements.txt' is an installer option"),
    ({"packages": ["optax=0.2"]}, "boot.packages[0]: 'optax=0.2' is not a requirement (PEP 508); write one such as"),
    ({"stage": "/tmp/wheels"}, "boot.stage: '/tmp/wheels' is not a Cloud Storage folder; use gs://BUCKET/PATH"),
    ({"stage": "gs://"}, "boot.stage: 'gs://' is not a Cloud Storage folder"),
    ({"stage": "gs://Bad_Bucket/x"}, "boot.stage: 'gs://Bad_Bucket/x' is not a Cloud Storage folder"),
    ({"stages": "gs://b/x"}, "boot.stages: unknown field; did you mean stage?"),
])
def test_bad_boot_sections_name_the_field_and_the_fix(boot, expected):
    with pytest.raises(SpecError) as raised:
        parse_spec({**GOOD, "boot": boot})
    assert expected in str(raised.value)


@pytest.mark.parametrize("field, given, expected", [
    ("index_url", "http://pypi.example.com/simple/",
     "boot.index_url: 'http://pypi.example.com/simple/': the VMs install from an https:// index"),
    ("index_url", "https://me:secret@pypi.example.com/simple/",
     "boot.index_url: 'https://me:secret@pypi.example.com/simple/' carries credentials; the spec is stored"),
    ("index_url", "pypi.example.com/simple", "boot.index_url: 'pypi.example.com/simple' is not a package index URL"),
    ("index_url", "https://europe-west4-python.pkg.dev/my-proj/simple/",
     "boot.index_url: 'https://europe-west4-python.pkg.dev/my-proj/simple/' is not an Artifact Registry Python "
     "repository's index; write https://REGION-python.pkg.dev/PROJECT/REPOSITORY/simple/"),
    ("index_url", "ar+https://pypi.example.com/simple/", "is not an Artifact Registry Python repository's index"),
    ("extra_index_urls", ["https://ok.example.com/simple/", "https://x.example.com/simple/?token=1"],
     "boot.extra_index_urls[1]: 'https://x.example.com/simple/?token=1' is not a package index URL"),
])
def test_a_bad_index_names_the_field_and_the_fix(field, given, expected):
    with pytest.raises(SpecError) as raised:
        parse_spec({**GOOD, "boot": {field: given}})
    assert expected in str(raised.value) and raised.value.exit_code == 2


def test_an_index_is_https_an_artifact_registry_repository_or_this_machines_loopback():
    boot = parse_spec({**GOOD, "boot": {
        "index_url": "ar+https://europe-west4-python.pkg.dev/my-proj/wheels/simple",
        "extra_index_urls": ["https://pypi.example.com/simple/", "https://us-python.pkg.dev/p-1/r/simple/",
                             "http://127.0.0.1:8080/simple/"]}}).boot
    assert boot.index_url == "https://europe-west4-python.pkg.dev/my-proj/wheels/simple/"  # read with the VMs' token
    assert boot.extra_index_urls == ["https://pypi.example.com/simple/", "https://us-python.pkg.dev/p-1/r/simple/",
                                     "http://127.0.0.1:8080/simple/"]
    assert (parse_spec(GOOD).boot.index_url, parse_spec(GOOD).boot.extra_index_urls) == (None, [])


def test_boot_packages_and_stage_are_kept_tidy():
    boot = parse_spec({**GOOD, "boot": {"packages": [" optax==0.2.4 ", "flax>=0.10; python_version>='3.11'"],
                                        "stage": "gs://my-bucket/podmanager/"}}).boot
    assert boot.packages == ["optax==0.2.4", "flax>=0.10; python_version>='3.11'"]
    assert boot.stage == "gs://my-bucket/podmanager"


@pytest.mark.parametrize("project", ["my-project", "podmanager-sim", "a23456", "a" * 30, "example.com:my-project"])
def test_real_project_ids_are_accepted(project):
    assert parse_spec({**GOOD, "project": project}).project == project


def test_a_project_from_the_environment_is_checked_too(monkeypatch):
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "../up")
    with pytest.raises(SpecError, match="project: '../up' is not a Google Cloud project id"):
        parse_spec({"name": "a", "zones": ["us-central2-b"], "slices": [{"accelerator": "v4-8"}]})


def test_the_slice_count_is_bounded_over_all_entries():
    two_entries = {**GOOD, "slices": [{"accelerator": "v4-8", "count": 600}, {"accelerator": "v4-8", "count": 600}]}
    with pytest.raises(SpecError, match="slices: 1200 slices over all entries; a cluster has at most 1024"):
        parse_spec(two_entries)
    at_the_bound = {**GOOD, "slices": [{"accelerator": "v4-8", "count": 1000}, {"accelerator": "v4-8", "count": 24}]}
    assert len(parse_spec(at_the_bound).slice_list()) == 1024


@pytest.mark.parametrize("fault, expected", [
    ("preempt:3", "simulation.faults[0] (preempt:3:0:0): there is no slice 3; this cluster's slices are 0 to 2"),
    ({"kind": "degrade", "slice": 9}, "simulation.faults[0] (degrade:9:"),
    ("hang:2:1", "simulation.faults[0] (hang:2:1:0): slice 2 has no host 1; its hosts are 0 to 0"),
])
def test_a_fault_on_a_slice_or_host_that_does_not_exist_is_refused_naming_it(fault, expected):
    with pytest.raises(SpecError) as raised:
        parse_spec({**GOOD, "simulation": {"faults": [fault]}})
    assert expected in str(raised.value)
    assert parse_spec({**GOOD, "simulation": {"faults": ["preempt:2", "hang:0:1"]}}).simulation.faults


@pytest.mark.parametrize("simulation, field", [
    ({"create_latency_s": -1}, "simulation.create_latency_s"),
    ({"create_latency_s": 86401}, "simulation.create_latency_s: Input should be less than or equal to 86400"),
    ({"delete_latency_s": 1e9}, "simulation.delete_latency_s"),
    ({"faults": ["preempt:0:100000"]}, "simulation.faults[0].after_s"),
    ({"faults": [{"kind": "maintenance", "slice": 0, "duration_s": 1e7}]}, "simulation.faults[0].duration_s"),
])
def test_absurd_latencies_are_refused(simulation, field):
    with pytest.raises(SpecError, match=re.escape(field)):
        parse_spec({**GOOD, "simulation": simulation})


def test_a_binary_spec_is_refused_naming_the_file(tmp_path):
    binary = tmp_path / "model.bin"
    binary.write_bytes(b"name: a\n\xff\xfe\x00\x81 slices")
    with pytest.raises(SpecError, match=f"--file: {re.escape(str(binary))} is not a text file"):
        load_spec(binary)


def test_a_key_given_twice_is_refused_naming_it(tmp_path):
    spec = tmp_path / "twice.yaml"
    spec.write_text("name: a\nslices:\n  - accelerator: v4-8\n    count: 2\n    count: 1\n")
    with pytest.raises(SpecError, match="the key 'count' is given twice"):
        load_spec(spec, dry_run=True)
    spec.write_text("name: a\nname: b\nslices:\n  - accelerator: v4-8\n")
    with pytest.raises(SpecError, match="the key 'name' is given twice"):
        load_spec(spec, dry_run=True)


def test_a_spec_nested_too_deeply_is_refused_naming_the_file(tmp_path):
    deep = tmp_path / "deep.yaml"
    deep.write_text("name: a\nslices: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(SpecError, match="deep.yaml: nested too deeply"):
        load_spec(deep)


def test_yaml_errors_name_the_file(tmp_path):
    tabbed = tmp_path / "tabbed.yaml"
    tabbed.write_text("name: a\n\tslices: []\n")
    with pytest.raises(SpecError, match=f'in "{re.escape(str(tabbed))}", line 2'):
        load_spec(tabbed)


# ---------------------------------------------------------------------- controller: where the controller runs

def test_left_out_the_controller_is_a_vm_on_google_cloud_and_this_machine_in_a_dry_run():
    """From a laptop Google Cloud refuses a local controller, so a spec that says nothing gets a
    VM there; the same spec's dry run keeps this machine (its simulated VMs reach it), and a spec
    that says `local: true` keeps it on Google Cloud too (checked at `up`: controller_place)."""
    gcp = {**GCP, "slices": [{"accelerator": "v4-8"}]}
    assert parse_spec(gcp).controller.local is False
    assert parse_spec(gcp, dry_run=True).controller.local is True
    assert parse_spec({**gcp, "controller": {"local": True}}).controller.local is True
    assert parse_spec({**gcp, "controller": {"machine_type": "n2-standard-8"}}).controller.local is False
    again = parse_spec(parse_spec(gcp).model_dump(mode="json"))  # a stored copy reads the same
    assert again.controller.local is False


def test_left_out_in_the_dry_runs_namespace_mode_the_controller_is_a_vm(monkeypatch):
    """There this machine stands outside the simulated VPC, as a laptop does on Google Cloud;
    the mode is the spec's `simulation.network`, else $PODMANAGER_SIM_NETWORK."""
    gcp = {**GCP, "slices": [{"accelerator": "v4-8"}]}
    monkeypatch.delenv("PODMANAGER_SIM_NETWORK", raising=False)
    namespaces = {**gcp, "simulation": {"network": "namespaces"}}
    assert parse_spec(namespaces, dry_run=True).controller.local is False
    assert parse_spec({**namespaces, "controller": {"local": True}}, dry_run=True).controller.local is True
    monkeypatch.setenv("PODMANAGER_SIM_NETWORK", "namespaces")
    assert parse_spec(gcp, dry_run=True).controller.local is False
    assert parse_spec({**gcp, "simulation": {"network": "loopback"}}, dry_run=True).controller.local is True


def test_the_controller_section_defaults():
    spec = parse_spec(GOOD)
    assert spec.controller.local is True and spec.controller.zone is None
    assert (spec.controller.machine_type, spec.controller.disk_gb) == ("e2-standard-4", 50)
    given = parse_spec({**GCP, "slices": [{"accelerator": "v4-8"}],
                        "controller": {"machine_type": "n2-standard-8", "zone": "us-central2-a", "disk_gb": 100}})
    assert (given.controller.machine_type, given.controller.zone, given.controller.disk_gb) == (
        "n2-standard-8", "us-central2-a", 100)


def test_a_controller_vm_takes_one_caller_address():
    given = parse_spec({**GOOD, "controller": {"local": False, "caller": "203.0.113.7/32"}})
    assert (given.controller.local, given.controller.caller) == (False, "203.0.113.7/32")
    for wider in ("203.0.113.0/24", "203.0.113.7/33", "laptop"):
        with pytest.raises(SpecError) as raised:
            parse_spec({**GOOD, "controller": {"local": False, "caller": wider}})
        assert raised.value.exit_code == 2 and "controller.caller" in str(raised.value), wider


@pytest.mark.parametrize("controller, expected", [
    ({"local": "no"}, "controller.local: Input should be a valid boolean"),
    ({"machine_type": "E2 Standard"}, "controller.machine_type: 'E2 Standard' is not a Compute Engine machine type"),
    ({"zone": "Zone_A"}, "controller.zone: 'Zone_A' is not a zone name"),
    ({"disk_gb": 5}, "controller.disk_gb: Input should be greater than or equal to 10"),
    ({"disk_gb": "50"}, "controller.disk_gb: Input should be a valid integer"),
    ({"machin_type": "e2-small"}, "controller.machin_type: unknown field; did you mean machine_type?"),
])
def test_bad_controller_fields_are_named(controller, expected):
    with pytest.raises(SpecError) as raised:
        parse_spec({**GOOD, "controller": controller})
    assert expected in str(raised.value)


def test_the_controller_zone_must_be_in_the_subnetworks_region():
    subnet = {"subnetwork": "projects/p/regions/us-central2/subnetworks/s"}
    with pytest.raises(SpecError) as raised:
        parse_spec({**GCP, "slices": [{"accelerator": "v4-8"}], "network": subnet,
                    "controller": {"zone": "europe-west4-a"}})
    assert ("controller.zone: europe-west4-a is not in region us-central2 of network.subnetwork "
            "projects/p/regions/us-central2/subnetworks/s") in str(raised.value)
    assert parse_spec({**GCP, "slices": [{"accelerator": "v4-8"}], "network": subnet,
                       "controller": {"zone": "us-central2-a"}}).controller.zone == "us-central2-a"

@pytest.mark.parametrize("change, field", [({"slices": [{"accelerator": "v4-8", "count": True}]}, "count"),
                                           ({"zones": []}, "zones"),
                                           ({"zones": [], "backend": "gcp", "project": "p"}, "zones")])
def test_a_spec_value_that_only_looks_right_is_refused(change, field):
    with pytest.raises(SpecError, match=field):
        parse_spec({**SPEC, **change})


def test_the_reference_examples_controller_section_lists_every_field_and_false_makes_a_controller_vm():
    """infra/examples/multislice.yaml is "every field with its default": its controller section
    is the spec's, and `local: false` (what it says `up` then does) is taken, not refused."""
    from pathlib import Path

    import yaml

    from podmanager.core.spec import ControllerSpec

    example = Path(__file__).parents[2] / "infra" / "examples" / "multislice.yaml"
    written = yaml.safe_load(example.read_text())
    assert written["controller"] == ControllerSpec().model_dump(mode="json")
    vm = parse_spec({**written, "controller": {**written["controller"], "local": False}}, dry_run=True)
    assert vm.controller.local is False
