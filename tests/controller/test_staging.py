"""`controller/staging.py`: where the TPU VMs get podmanager from, and its wheel put there: a dry
run's into the emulator's simulated bucket on this disk, Google Cloud's through gcsfs (here
against a local GCS emulator, in a process of its own)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from homes import use_home
from local_gcs import local_gcs

from podmanager.controller import boot_lock
from podmanager.controller.software import controller_versions
from podmanager.controller.staging import resolve_software, stage_root, stage_wheel
from podmanager.controller.wheel import wheel_version
from podmanager.core import paths
from podmanager.core.errors import SpecError
from podmanager.core.spec import parse_spec

SIMULATED = {"name": "demo", "backend": "simulated", "slices": [{"accelerator": "v4-8"}]}
GCP = {"name": "demo", "project": "my-project", "zones": ["us-central2-b"], "slices": [{"accelerator": "v4-8"}]}
BUCKET = "boot-bucket"


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    use_home(monkeypatch, tmp_path / "home")
    return tmp_path / "home"


@pytest.fixture(autouse=True)
def compiled(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, object]]:
    """No package index here: each compile of the VMs' lock is recorded and answers a fixed lock
    (tests/test_boot_lock.py compiles real ones)."""
    asked: list[dict[str, object]] = []

    def compile_lock(requirements: list[str], **options: object) -> str:
        asked.append({"requirements": requirements, **options})
        return "six==1.16.0\n"

    monkeypatch.setattr(boot_lock, "compile_lock", compile_lock)
    return asked


def a_wheel(folder: Path, version: str = "0.2.0", content: bytes = b"a wheel") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"podmanager-{version}-py3-none-any.whl"
    wheel.write_bytes(content)
    return wheel


# ---------------------------------------------------------------------- where


@pytest.mark.parametrize("spec, root", [
    ({**GCP, "boot": {"stage": "gs://mine/boot/"}, "checkpoints": "gs://ck/x"}, "gs://mine/boot"),
    ({**GCP, "checkpoints": "gs://ck/runs"}, "gs://ck/runs/podmanager-boot"),
    (SIMULATED, "gs://podmanager-sim-podmanager/boot"),  # the emulator's bucket of the simulated project
    ({**SIMULATED, "project": "my-sim"}, "gs://my-sim-podmanager/boot"),
    ({**SIMULATED, "boot": {"stage": "gs://mine/b"}}, "gs://mine/b"),
])
def test_the_stage_is_boot_stage_else_beside_gs_checkpoints_else_the_simulated_bucket(spec, root) -> None:
    assert stage_root(parse_spec(spec)) == root


def test_on_google_cloud_without_a_bucket_the_stage_is_refused_with_the_fixes() -> None:
    for spec in (GCP, {**GCP, "checkpoints": "/mnt/checkpoints"}):
        with pytest.raises(SpecError) as refused:
            stage_root(parse_spec(spec))
        message = str(refused.value)
        assert message.startswith("boot.stage: podmanager is on no package index, so `up` uploads a wheel")
        assert "set boot.stage: gs://BUCKET/PATH (or checkpoints: gs://...)" in message
        assert "boot.podmanager to a version on your package index or a wheel's URL" in message


# ---------------------------------------------------------------------- a dry run: the simulated bucket


def test_a_dry_run_stages_into_the_emulators_bucket_once(tmp_path: Path, home: Path) -> None:
    spec = parse_spec(SIMULATED)
    wheel = a_wheel(tmp_path / "dist")

    url = stage_wheel(spec, wheel)

    assert url == "gs://podmanager-sim-podmanager/boot/podmanager-0.2.0-py3-none-any.whl"
    stored = home / "sim" / "storage" / "podmanager-sim-podmanager" / "boot" / wheel.name
    assert stored == paths.storage_object("podmanager-sim-podmanager", f"boot/{wheel.name}")
    assert stored.read_bytes() == b"a wheel"
    assert [p.name for p in stored.parent.iterdir()] == [wheel.name]  # no temporary file left

    stamp = stored.stat().st_mtime_ns
    assert stage_wheel(spec, wheel) == url and stored.stat().st_mtime_ns == stamp  # there already: kept


def test_resolving_a_dry_runs_software_builds_and_stages_the_running_podmanager(home: Path) -> None:
    spec = parse_spec({**SIMULATED, "boot": {"packages": ["optax==0.2.4"]}})

    software = resolve_software(spec)

    [built] = (home / "wheels").iterdir()
    assert software.podmanager == wheel_version(built)
    assert software.podmanager_source == f"gs://podmanager-sim-podmanager/boot/{built.name}"
    assert paths.storage_object("podmanager-sim-podmanager", f"boot/{built.name}").read_bytes() == built.read_bytes()
    running = controller_versions()
    assert (software.python, software.ray, software.jax) == (running.python, running.ray, running.jax)
    assert software.podmanager == running.podmanager  # the VM reports what the controller runs
    assert software.pinned_requirements()[1] == f"jax=={running.jax}"  # a dry run's chips are CPU devices
    assert software.packages == ("optax==0.2.4",)
    assert resolve_software(spec) == software  # the same tree: the same wheel, nothing new


def test_a_real_vms_environment_is_locked_once_for_the_tpu_platform_and_reused(
        compiled: list[dict[str, object]]) -> None:
    spec = parse_spec({**GCP, "boot": {"podmanager": "0.2.0", "packages": ["orbax-checkpoint"]}})
    first = resolve_software(spec)
    again = resolve_software(spec)  # a later `up`, a recovery: the same lock, not resolved again

    assert first.lock == again.lock == "six==1.16.0\n"
    [asked] = compiled
    assert asked["platform"] == boot_lock.TPU_VM_PLATFORM and asked["python"] == first.python
    assert asked["requirements"] == ["podmanager==0.2.0", f"ray[default]=={first.ray}", f"jax[tpu]=={first.jax}",
                                     "orbax-checkpoint"]
    edited = resolve_software(parse_spec({**GCP, "boot": {"podmanager": "0.2.0", "packages": ["orbax-checkpoint<1"]}}))
    assert len(compiled) == 2 and edited.install_key() != first.install_key()


def test_simulated_vms_that_start_from_the_controllers_environment_get_no_lock(
        compiled: list[dict[str, object]]) -> None:
    assert resolve_software(parse_spec({**SIMULATED, "boot": {"podmanager": "0.2.0"},
                                        "simulation": {"vm_image": "controller"}})).lock == ""
    bare = resolve_software(parse_spec({**SIMULATED, "boot": {"podmanager": "0.2.0"},
                                        "simulation": {"vm_image": "bare"}}))
    assert bare.lock and compiled[0]["platform"] is None  # this machine's platform


def test_a_version_or_a_url_is_installed_as_given_and_nothing_is_staged(home: Path) -> None:
    by_version = resolve_software(parse_spec({**GCP, "boot": {"podmanager": "0.2.0"}}))
    assert (by_version.podmanager, by_version.podmanager_source) == ("0.2.0", "podmanager==0.2.0")

    url = "https://wheels.example.com/podmanager-0.3.0+hab12-py3-none-any.whl"
    by_url = resolve_software(parse_spec({**GCP, "boot": {"podmanager": url}}))
    assert (by_url.podmanager, by_url.podmanager_source) == ("0.3.0+hab12", url)
    assert not (home / "wheels").exists() and not paths.storage_dir().exists()


def test_a_wheel_on_this_machine_is_staged_and_a_missing_one_refused(tmp_path: Path) -> None:
    wheel = a_wheel(tmp_path / "dist", "0.4.0")
    software = resolve_software(parse_spec({**SIMULATED, "boot": {"podmanager": str(wheel)}}))
    assert software.podmanager == "0.4.0"
    assert software.podmanager_source == f"gs://podmanager-sim-podmanager/boot/{wheel.name}"

    wheel.unlink()
    with pytest.raises(SpecError, match=f"boot.podmanager: {wheel} is no file on this machine"):
        resolve_software(parse_spec({**SIMULATED, "boot": {"podmanager": str(wheel)}}))


@pytest.mark.parametrize("bucket, name", [("b", "../../etc/passwd"), ("b", "a//b"), ("..", "x"), ("b", ""),
                                          ("b/c", "x"), ("b", "a/./b")])
def test_a_simulated_object_name_cannot_leave_its_buckets_folder(bucket: str, name: str) -> None:
    with pytest.raises(ValueError, match="is no object a simulated bucket keeps"):
        paths.storage_object(bucket, name)


# ---------------------------------------------------------------------- Google Cloud, through gcsfs

STAGE = r"""
import json, sys
from pathlib import Path
from podmanager.core.errors import PodmanagerError
from podmanager.core.spec import parse_spec
from podmanager.controller.staging import stage_wheel

for stage, wheel in zip(sys.argv[1::2], sys.argv[2::2]):
    spec = parse_spec({"name": "demo", "project": "my-project", "zones": ["us-central2-b"],
                       "slices": [{"accelerator": "v4-8"}], "boot": {"stage": stage}})
    try:
        print(json.dumps(stage_wheel(spec, Path(wheel))))
    except PodmanagerError as failed:
        print(json.dumps({"refused": str(failed)}))
"""


@pytest.fixture
def gcs() -> Iterator[str]:
    with local_gcs(BUCKET) as endpoint:
        yield endpoint


def stage_in_gcs(endpoint: str, *stages: tuple[str, Path]) -> list[object]:
    """stage_wheel of each (stage, wheel) in turn, in a process of its own: gcsfs reads its
    switches when it is imported. Each one's URL, or {"refused": its message}."""
    env = {**os.environ,
           "STORAGE_EMULATOR_HOST": endpoint,
           "FSSPEC_GS_TOKEN": "anon",  # no credentials (a developer's own must not matter)
           # Else gcsfs first asks the Storage Control gRPC API for the bucket's layout, which no
           # emulator serves, and retries for a minute.
           "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}
    args = [str(part) for stage in stages for part in stage]
    done = subprocess.run([sys.executable, "-c", STAGE, *args], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


def read_object(endpoint: str, name: str) -> bytes:
    quoted = urllib.request.quote(name, safe="")
    with urllib.request.urlopen(f"{endpoint}/storage/v1/b/{BUCKET}/o/{quoted}?alt=media", timeout=10) as answer:
        return answer.read()


def object_names(endpoint: str) -> list[str]:
    with urllib.request.urlopen(f"{endpoint}/storage/v1/b/{BUCKET}/o", timeout=10) as answer:
        return sorted(item["name"] for item in json.load(answer).get("items", []))


def test_on_google_cloud_the_wheel_is_uploaded_once_through_gcsfs(gcs: str, tmp_path: Path) -> None:
    wheel = a_wheel(tmp_path / "dist", "0.5.0", b"the wheel's bytes")
    same_name = a_wheel(tmp_path / "elsewhere", "0.5.0", b"other bytes")  # a name is a version: what is there stays
    stage = f"gs://{BUCKET}/podmanager/boot"

    first, again, refused = stage_in_gcs(gcs, (stage, wheel), (stage, same_name), ("gs://no-such-bucket/boot", wheel))

    assert first == again == f"{stage}/{wheel.name}"
    assert object_names(gcs) == [f"podmanager/boot/{wheel.name}"]
    assert read_object(gcs, f"podmanager/boot/{wheel.name}") == b"the wheel's bytes"
    assert isinstance(refused, dict)
    assert refused["refused"].startswith(f"cannot upload podmanager's wheel to gs://no-such-bucket/boot/{wheel.name}: "
                                         "the bucket no-such-bucket does not exist")
    assert refused["refused"].endswith("check that the bucket exists and that your credentials may write to it "
                                       "(boot.stage names the folder)")
