"""What a run gets when the user says nothing: where it checkpoints (so running the same
program again resumes), and which programs are refused before anything starts."""

import re

import pytest

from podmanager.api.submission import default_checkpoint_dir
from podmanager.core import paths
from podmanager.core.errors import SpecError
from podmanager.core.spec import parse_spec
from podmanager.core.workload import Workload

SPEC = {"name": "d", "backend": "simulated", "slices": [{"accelerator": "v4-8"}]}


def test_the_same_program_checkpoints_to_the_same_folder_whatever_its_arguments():
    spec = parse_spec(SPEC)
    first = default_checkpoint_dir(spec, Workload(entrypoint="workloads/train_mlp.py", args=["--steps", "100"]))
    again = default_checkpoint_dir(spec, Workload(entrypoint="workloads/train_mlp.py", args=["--steps", "300"]))
    other = default_checkpoint_dir(spec, Workload(entrypoint="workloads/train_transformer.py"))
    assert first == again == str(paths.cluster_dir("d") / "checkpoints" / "train_mlp")
    assert other != first


def test_a_checkpoint_dir_given_is_used_as_is():
    workload = Workload(entrypoint="x.py", checkpoint_dir="gs://b/ck")
    assert default_checkpoint_dir(parse_spec(SPEC), workload) == "gs://b/ck"


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
