"""podmanager/api/submission.py: where a run checkpoints, decided before anything starts: URLs
stay URLs, the spec's `checkpoints:` root, on GCP no local folder for a run that spans several
hosts, a gs:// dir's bucket checked, and what a run gets when the user says nothing."""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterator

import pytest

from podmanager import runtime
from podmanager.api.submission import (
    NO_CHECKPOINTS_WARNING,
    RunCheckpoints,
    check_bucket,
    default_checkpoint_dir,
    run_checkpoints,
)
from podmanager.core import paths
from podmanager.core.errors import SpecError
from podmanager.core.spec import parse_spec
from podmanager.core.workload import Workload
from podmanager.runtime import Checkpointer
from podmanager.runtime.checkpoints import is_url, resolve_directory

SPEC = {"name": "c", "backend": "simulated", "slices": [{"accelerator": "v4-8"}]}


def gcp(*slices: str, **fields: object):  # type: ignore[no-untyped-def]
    return parse_spec({"name": "c", "project": "my-project", "zones": ["z"],
                       "slices": [{"accelerator": a} for a in slices], **fields})


def dry(**fields: object):  # type: ignore[no-untyped-def]
    return parse_spec({"name": "d", "backend": "simulated", "slices": [{"accelerator": "v4-16"}], **fields})


TRAIN = Workload(entrypoint="train.py")

# ------------------------------------------------------------------ the runtime keeps URLs


@pytest.mark.parametrize("url", ["gs://b/ck", "gs://b/ck/", "s3://b/x", "file:///tmp/ck", "gcs+grpc://b/ck"])
def test_a_url_is_kept_as_it_is(url: str) -> None:
    assert is_url(url)
    assert resolve_directory(url) == url


def test_a_local_path_is_made_absolute_against_the_current_folder(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert not is_url("ck") and not is_url("/abs/gs:/x") and not is_url("C:/ck")
    assert resolve_directory("ck") == str(tmp_path / "ck")


def test_the_checkpointer_hands_a_gs_url_to_orbax_unchanged(monkeypatch) -> None:
    import orbax.checkpoint as ocp

    opened: list[str] = []

    class Manager:  # stands for orbax's, which would reach out to the bucket
        def __init__(self, directory: str, options: object) -> None:
            opened.append(directory)

    monkeypatch.setattr(ocp, "CheckpointManager", Manager)
    assert runtime.Checkpointer("gs://b/ck").directory == "gs://b/ck"
    monkeypatch.setenv("PODMANAGER_CHECKPOINT_DIR", "gs://b/from-env")
    assert runtime.Checkpointer().directory == "gs://b/from-env"
    assert opened == ["gs://b/ck", "gs://b/from-env"]


def test_the_checkpointer_still_makes_a_local_path_absolute(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with runtime.Checkpointer("ck") as checkpointer:
        assert checkpointer.directory == str(tmp_path / "ck")
        assert checkpointer.enabled

# ------------------------------------------------------------------ the spec's checkpoints: root


def test_checkpoints_is_optional_and_survives_the_stored_spec() -> None:
    assert gcp("v4-8").checkpoints is None
    spec = gcp("v4-8", checkpoints="gs://bucket/prefix/")
    assert spec.checkpoints == "gs://bucket/prefix"
    assert parse_spec(spec.model_dump(mode="json")).checkpoints == "gs://bucket/prefix"
    assert dry(checkpoints="/mnt/shared//ck/").checkpoints == "/mnt/shared/ck"


@pytest.mark.parametrize("value, expected", [
    ("ckpts", "checkpoints: 'ckpts' is neither a URL nor an absolute path; use a bucket every host shares, "
              "e.g. gs://my-bucket/checkpoints"),
    ("~/ck", "checkpoints: '~/ck' is neither a URL nor an absolute path"),
    ("gs://", "checkpoints: 'gs://' names no bucket"),
    (5, "checkpoints:"),
])
def test_a_bad_checkpoints_root_names_the_field_and_the_fix(value: object, expected: str) -> None:
    with pytest.raises(SpecError) as raised:
        gcp("v4-8", checkpoints=value)
    assert expected in str(raised.value)
    assert raised.value.exit_code == 2


def test_a_misspelt_checkpoints_is_pointed_at_the_field() -> None:
    with pytest.raises(SpecError, match="checkpoint: unknown field; did you mean checkpoints?"):
        gcp("v4-8", checkpoint="gs://b/ck")


def test_a_run_checkpoints_under_the_spec_root_by_cluster_and_program() -> None:
    spec = gcp("v4-16", checkpoints="gs://bucket/prefix")
    assert run_checkpoints(spec, TRAIN) == RunCheckpoints("gs://bucket/prefix/c/train", None)
    named = Workload(entrypoint="-m pkg.main", name="exp1")
    assert run_checkpoints(spec, named).directory == "gs://bucket/prefix/c/exp1"
    # A dry run may name a root too: a folder of this machine, or a bucket.
    assert run_checkpoints(dry(checkpoints="/mnt/ck"), TRAIN).directory == "/mnt/ck/d/train"
    assert run_checkpoints(dry(checkpoints="gs://b"), TRAIN).directory == "gs://b/d/train"


def test_a_dry_run_without_a_root_shares_one_local_folder_among_its_hosts() -> None:
    assert run_checkpoints(dry(), TRAIN) == RunCheckpoints(str(paths.cluster_dir("d") / "checkpoints" / "train"))


def test_checkpoint_dir_wins_over_the_spec_root() -> None:
    spec = gcp("v4-16", checkpoints="gs://bucket/prefix")
    assert run_checkpoints(spec, Workload(entrypoint="train.py", checkpoint_dir="gs://other/ck")).directory == \
        "gs://other/ck"

# ------------------------------------------------------------------ what GCP refuses, what it warns of


def test_a_gcp_run_without_any_checkpoint_dir_starts_with_a_warning() -> None:
    result = run_checkpoints(gcp("v4-16"), TRAIN)
    assert result == RunCheckpoints(None, NO_CHECKPOINTS_WARNING)
    assert result.warning == ("no checkpoint dir: a preemption restarts this run from step 0; "
                              "pass --checkpoint-dir gs://... or set checkpoints: in the spec")


def test_a_gcp_multi_host_run_is_refused_a_local_checkpoint_dir(tmp_path) -> None:
    workload = Workload(entrypoint="train.py", checkpoint_dir=str(tmp_path / "ck"))
    with pytest.raises(SpecError) as raised:
        run_checkpoints(gcp("v4-16"), workload)
    assert raised.value.exit_code == 2
    assert str(raised.value).startswith(f"--checkpoint-dir: {tmp_path / 'ck'} is a folder on each host's own disk, "
                                        "but this run spans 2 hosts")
    assert "Pass --checkpoint-dir gs://BUCKET/PATH, or set 'checkpoints: gs://BUCKET/PREFIX' in the spec" in \
        str(raised.value)
    # The same with a bucket starts, and says nothing.
    bucket = Workload(entrypoint="train.py", checkpoint_dir="gs://b/ck")
    assert run_checkpoints(gcp("v4-16"), bucket) == RunCheckpoints("gs://b/ck", None)


def test_hosts_are_counted_over_the_run_s_slices_not_the_cluster_s() -> None:
    spec = gcp("v4-8", "v4-8")  # one host each
    local = Workload(entrypoint="train.py", checkpoint_dir="/ck")
    with pytest.raises(SpecError, match="this run spans 2 hosts"):
        run_checkpoints(spec, local)
    with pytest.raises(SpecError, match="this run spans 2 hosts"):
        default_checkpoint_dir(spec, local)  # its callers get the refusal too
    # One host holds the whole checkpoint; only a replaced slice loses it, which is worth saying.
    one = run_checkpoints(spec, local.model_copy(update={"slices": [1]}))
    assert one.directory == "/ck"
    assert one.warning is not None and "restarts from step 0" in one.warning
    assert run_checkpoints(spec, local, slices=[0]).directory == "/ck"


def test_a_local_spec_root_on_a_multi_host_gcp_run_names_checkpoints() -> None:
    with pytest.raises(SpecError) as raised:
        run_checkpoints(gcp("v4-16", checkpoints="/mnt/ck"), TRAIN)
    assert str(raised.value).startswith("checkpoints: /mnt/ck/c/train is a folder on each host's own disk")


def test_a_local_checkpoint_dir_over_a_bucket_root_is_told_to_drop_it() -> None:
    with pytest.raises(SpecError) as raised:
        run_checkpoints(gcp("v4-16", checkpoints="gs://bucket/p"), Workload(entrypoint="train.py", checkpoint_dir="ck"))
    assert "or drop it to use the spec's checkpoints: gs://bucket/p" in str(raised.value)

# ------------------------------------------------------------------ a local --checkpoint-dir


def test_a_relative_checkpoint_dir_is_made_absolute_against_the_client_s_folder(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    workload = Workload(entrypoint="train.py", checkpoint_dir="ck")
    assert run_checkpoints(dry(), workload).directory == str(tmp_path / "ck")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    home = Workload(entrypoint="train.py", checkpoint_dir="~/ck")
    assert run_checkpoints(dry(), home).directory == str(tmp_path / "home" / "ck")
    assert os.path.isabs(default_checkpoint_dir(dry(), workload) or "")


def test_a_checkpoint_dir_that_is_a_file_is_refused(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("")
    with pytest.raises(SpecError) as raised:
        run_checkpoints(dry(), Workload(entrypoint="train.py", checkpoint_dir="notes.txt"))
    assert str(raised.value).startswith(f"--checkpoint-dir: {tmp_path / 'notes.txt'} is a file")
    assert raised.value.exit_code == 2
    (tmp_path / "existing").mkdir()  # a folder that holds checkpoints already is the point
    assert run_checkpoints(dry(), Workload(entrypoint="train.py", checkpoint_dir="existing")).directory == \
        str(tmp_path / "existing")

def test_a_checkpoint_folder_that_cannot_be_one_is_refused_at_submit_and_fails_every_process(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(SpecError, match="--checkpoint-dir: .* cannot be made"):
        run_checkpoints(parse_spec(SPEC), Workload(entrypoint="x.py", checkpoint_dir=str(blocker / "ck")))
    with pytest.raises(FileExistsError):  # in each process of the program, before orbax's barrier
        Checkpointer(str(blocker))


# A gs:// checkpoint dir's bucket is checked at submit, against a local GCS emulator: a
# bucket that does not exist is bad input (nothing starts); one that cannot be asked about is
# a warning, not a refusal (the hosts' service account may reach what this machine cannot).
emulator_server = pytest.importorskip(
    "gcp_storage_emulator.server", reason="the GCS emulator is in the test extra: pip install -e '.[test]'")

BUCKET = "ckpt-bucket"


@pytest.fixture
def gcs(monkeypatch) -> Iterator[str]:
    """gcsfs in this process pointed at an in-memory GCS with one bucket, no credentials."""
    server = emulator_server.create_server("127.0.0.1", 0, in_memory=True, default_bucket=BUCKET)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{server._api._httpd.server_port}"
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", endpoint)
        monkeypatch.setenv("FSSPEC_GS_TOKEN", "anon")
        monkeypatch.setenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
        yield endpoint
    finally:
        server.stop()


def test_a_bucket_that_exists_passes_and_one_that_does_not_is_bad_input(gcs):
    assert check_bucket(f"gs://{BUCKET}/runs/train") is None
    with pytest.raises(SpecError, match="bucket gs://ckpt-bucket-typo does not exist") as refused:
        check_bucket("gs://ckpt-bucket-typo/runs/train")
    assert refused.value.exit_code == 2 and "gcloud storage buckets create" in refused.value.hint


def test_local_dirs_and_other_urls_are_not_asked_about(monkeypatch):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")  # would fail if it were asked
    assert check_bucket(None) is None
    assert check_bucket("/tmp/ck") is None
    assert check_bucket("s3://b/ck") is None


def test_cloud_storage_out_of_reach_is_a_warning_within_the_timeout(monkeypatch):
    silent = socket.socket()  # listens, never answers: a network that drops the request
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    try:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{silent.getsockname()[1]}")
        monkeypatch.setenv("FSSPEC_GS_TOKEN", "anon")
        warning = check_bucket("gs://somewhere/ck", timeout_s=1.0)
    finally:
        silent.close()
    assert warning is not None and "could not check that bucket gs://somewhere exists" in warning


# What a run gets when the user says nothing: where it checkpoints (so running the same
# program again resumes), and which programs are refused before anything starts.
DEFAULTS_SPEC = {"name": "d", "backend": "simulated", "slices": [{"accelerator": "v4-8"}]}


def test_the_same_program_checkpoints_to_the_same_folder_whatever_its_arguments():
    spec = parse_spec(DEFAULTS_SPEC)
    first = default_checkpoint_dir(spec, Workload(entrypoint="workloads/train_mlp.py", args=["--steps", "100"]))
    again = default_checkpoint_dir(spec, Workload(entrypoint="workloads/train_mlp.py", args=["--steps", "300"]))
    other = default_checkpoint_dir(spec, Workload(entrypoint="workloads/train_transformer.py"))
    assert first == again == str(paths.cluster_dir("d") / "checkpoints" / "train_mlp")
    assert other != first


def test_a_checkpoint_dir_given_is_used_as_is():
    workload = Workload(entrypoint="x.py", checkpoint_dir="gs://b/ck")
    assert default_checkpoint_dir(parse_spec(DEFAULTS_SPEC), workload) == "gs://b/ck"


def test_a_missing_program_or_module_is_refused(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "train.py").write_text("")
    Workload(entrypoint="train.py", working_dir=str(tmp_path)).check_program()
    with pytest.raises(SpecError, match="run: -m pkg: .* is a package without __main__.py"):
        Workload(entrypoint="-m pkg", working_dir=str(tmp_path)).check_program()  # python -m cannot run it
    (tmp_path / "pkg" / "__main__.py").write_text("")
    Workload(entrypoint="-m pkg", working_dir=str(tmp_path)).check_program()
    Workload(entrypoint="-m json.tool", working_dir=str(tmp_path)).check_program()  # installed
    with pytest.raises(SpecError, match="nope.py is not a file in the working dir"):
        Workload(entrypoint="nope.py", working_dir=str(tmp_path)).check_program()
    # A module may be installed by the run's requirements: it is looked for on the hosts, after their setup.
    Workload(entrypoint="-m nopkg.main", working_dir=str(tmp_path)).check_program()
    with pytest.raises(SpecError, match="train.py is left out of what is shipped"):
        Workload(entrypoint="train.py", working_dir=str(tmp_path)).check_program(shipped={"other.py"})


def test_the_run_command_line_becomes_a_workload_with_the_flag_named_on_error():
    assert Workload.from_argv(["train.py", "--steps", "5"]).entrypoint == "train.py"
    assert Workload.from_argv(["-m", "pkg.main", "x"]).entrypoint == "-m pkg.main"
    assert Workload.from_argv(["bash", "-c", "echo $JAX_PROCESS_ID"]).command == ["bash", "-c", "echo $JAX_PROCESS_ID"]
    with pytest.raises(SpecError, match="--hang-timeout"):
        Workload.from_argv(["train.py"], hang_timeout_s=-1)
    with pytest.raises(SpecError, match="name a program"):
        Workload.from_argv([])


def test_a_folder_or_a_data_file_as_the_program_is_refused_at_submit(tmp_path):
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "requirements.txt").write_text("numpy\n")
    (tmp_path / "job.sh").write_text("#!/bin/sh\n")
    with pytest.raises(SpecError, match="run: mypkg is a folder, not a program; PROGRAM is a .py file, -m module"):
        Workload.from_argv(["mypkg"], working_dir=str(tmp_path)).check_program()
    with pytest.raises(SpecError, match="run: requirements.txt is not a program") as data_file:
        Workload.from_argv(["requirements.txt"], working_dir=str(tmp_path)).check_program()
    assert "-r requirements.txt" in str(data_file.value)
    with pytest.raises(SpecError, match="run: job.sh is not a program"):
        Workload.from_argv(["job.sh"], working_dir=str(tmp_path)).check_program()
    (tmp_path / "job.sh").chmod(0o755)
    Workload.from_argv(["./job.sh"], working_dir=str(tmp_path)).check_program()
    Workload.from_argv(["python", "-c", "pass"], working_dir=str(tmp_path)).check_program()  # not in the folder


@pytest.mark.parametrize("argv, name", [(["$(id).py"], "id"), (["Train `whoami`.py"], "train-whoami"),
                                        (["-m", "pkg.train"], "pkg"), (["--", "./run it;rm -rf x.sh"], "run-it-rm--rf-x.sh"),
                                        (["..py"], "program")])
def test_the_program_name_in_run_ids_keeps_only_a_safe_charset(argv, name):
    from podmanager.attempts.attempt import new_run_id

    workload = Workload.from_argv(argv[1:] if argv[0] == "--" else argv)
    assert workload.display_name == name
    assert re.fullmatch(r"[a-z0-9_.-]+", new_run_id(workload))


def test_a_program_outside_the_working_dir_is_refused_as_not_shipped_not_as_ignored(tmp_path):
    """`../train.py` or an absolute path is a file here but not in the folder shipped: no
    .gitignore is to blame (there is none), the folder is."""
    (tmp_path / "proj").mkdir()
    (tmp_path / "train.py").write_text("")
    for program in ("../train.py", str(tmp_path / "train.py")):
        workload = Workload(entrypoint=program, working_dir=str(tmp_path / "proj"))
        for shipped in ({"other.py"}, None):  # as the controller checks it, and as a laptop does before shipping
            with pytest.raises(SpecError) as refused:
                workload.check_program(shipped)
            error = refused.value
            assert f"{program} is outside the working dir {tmp_path / 'proj'}" in error.message
            assert "ignore" not in str(error) and "--working-dir" in error.hint and error.exit_code == 2
    (tmp_path / "proj" / "linked.py").symlink_to(tmp_path / "train.py")  # a link inside it is shipped as a file
    Workload(entrypoint="linked.py", working_dir=str(tmp_path / "proj")).check_program({"linked.py"})
