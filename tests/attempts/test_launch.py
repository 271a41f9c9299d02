"""The distributed environment of each process (pure) and the working-dir package."""

import io
import zipfile

import pytest

from podmanager.attempts.attempt import AttemptRunner
from podmanager.attempts.launch import launch_envs
from podmanager.core.code_zip import pack
from podmanager.core.errors import SpecError
from podmanager.core.records import HostSlot
from podmanager.core.workload import Workload, check_parallelism, expand


def slots(*shape):
    """shape: hosts per slice, e.g. (2,) for one v4-16 or (1, 1) for two v4-8."""
    return [HostSlot(s, w, f"c-s{s}", f"10.0.{s}.{w}", 4, "v4-16") for s, hosts in enumerate(shape) for w in range(hosts)]


def test_one_slice_two_hosts():
    envs = launch_envs(slots(2), coordinator_port=1234, cluster="c", run_id="r", attempt=3,
                       checkpoint_dir="/ckpt", parallelism="data", simulated=True)
    assert [e["JAX_PROCESS_ID"] for e in envs] == ["0", "1"]
    assert {e["JAX_COORDINATOR_ADDRESS"] for e in envs} == {"10.0.0.0:1234"}
    assert {e["JAX_NUM_PROCESSES"] for e in envs} == {"2"}
    assert [e["TPU_WORKER_ID"] for e in envs] == ["0", "1"]
    assert {e["TPU_WORKER_HOSTNAMES"] for e in envs} == {"10.0.0.0,10.0.0.1"}
    assert envs[0]["PODMANAGER_CHECKPOINT_DIR"] == "/ckpt" and envs[0]["PODMANAGER_ATTEMPT"] == "3"
    assert envs[0]["XLA_FLAGS"] == "--xla_force_host_platform_device_count=4" and envs[0]["JAX_PLATFORMS"] == "cpu"
    assert not any(k.startswith("MEGASCALE") for k in envs[0])
    assert {e["PODMANAGER_NUM_SLICES"] for e in envs} == {"1"}  # runtime.slice_count()


def test_multislice_sets_megascale_per_slice():
    envs = launch_envs(slots(1, 1), coordinator_port=1234, cluster="c", run_id="r", attempt=0,
                       checkpoint_dir=None, parallelism="data", simulated=False)
    assert [e["MEGASCALE_SLICE_ID"] for e in envs] == ["0", "1"]
    assert {e["MEGASCALE_NUM_SLICES"] for e in envs} == {"2"}
    assert {e["PODMANAGER_NUM_SLICES"] for e in envs} == {"2"}
    assert {e["MEGASCALE_COORDINATOR_ADDRESS"] for e in envs} == {"10.0.0.0:8081"}
    assert [e["TPU_WORKER_HOSTNAMES"] for e in envs] == ["10.0.0.0", "10.0.1.0"]
    assert [e["JAX_PROCESS_ID"] for e in envs] == ["0", "1"]
    assert "XLA_FLAGS" not in envs[0] and "PODMANAGER_CHECKPOINT_DIR" not in envs[0]


def test_slots_must_be_ordered():
    with pytest.raises(ValueError):
        launch_envs(list(reversed(slots(2))), coordinator_port=1, cluster="c", run_id="r", attempt=0,
                    checkpoint_dir=None, parallelism="data", simulated=True)


def test_wrong_mesh_is_a_spec_error_naming_the_flag():
    assert check_parallelism("data=2,model=4", 8) == {"data": 2, "model": 4}
    with pytest.raises(SpecError, match="--parallelism: .*8 devices"):
        check_parallelism("data=3,model=4", 8)


def test_workload_argv_and_expansion():
    command = Workload(command=["python", "s.py", "--rank", "$JAX_PROCESS_ID", "${TPU_WORKER_ID}x", "$NOPE"])
    assert command.argv("py", {"JAX_PROCESS_ID": "3", "TPU_WORKER_ID": "1"}) == ["python", "s.py", "--rank", "3", "1x", "$NOPE"]
    script = Workload(entrypoint="workloads/train_mlp.py", args=["--steps", "5"])
    assert script.argv("/usr/bin/python3", {}) == ["/usr/bin/python3", "-u", "workloads/train_mlp.py", "--steps", "5"]
    assert Workload(entrypoint="-m pkg.main").argv("py", {}) == ["py", "-u", "-m", "pkg.main"]
    assert expand("$A-$B", {"A": "1"}) == "1-$B"
    with pytest.raises(ValueError):
        Workload()
    with pytest.raises(ValueError):
        Workload(entrypoint="a.py", command=["b"])


def test_the_kept_zip_reaches_the_hosts_as_it_is(tmp_path, podmanager_home):
    """Packed once, where the run was submitted: the supervisor hands those very bytes on."""
    (tmp_path / "project" / "pkg").mkdir(parents=True)
    (tmp_path / "project" / "code.py").write_text("print(1)")
    (tmp_path / "project" / "pkg" / "m.py").write_text("x = 1")
    code = pack(tmp_path / "project")
    kept = tmp_path / f"{code.digest}.zip"
    kept.write_bytes(code.data)
    put: list[bytes] = []

    class Remote:
        def put(self, value):
            put.append(value)
            return "ref"

    runner = AttemptRunner("c", Workload(entrypoint="code.py"), "r", simulated=True, checkpoint_dir=None,
                           code_zip=kept, remote=Remote())  # type: ignore[arg-type]
    assert runner.code() == "ref" and runner.code() == "ref" and put == [code.data]  # put once
    zipped = zipfile.ZipFile(io.BytesIO(put[0]))
    assert sorted(zipped.namelist()) == ["code.py", "pkg/m.py"]
    assert zipped.read("pkg/m.py") == b"x = 1"
