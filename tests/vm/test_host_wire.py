"""The controller <-> host agent records (`vm/host_wire.py`): typed once, versioned, and
what the agent's machinery (`HostRuns`) takes as they are."""

import hashlib
import io
import pickle
import sys
import zipfile

import pytest
from pydantic import ValidationError

from podmanager.core.workload import Workload
from podmanager.vm.host_wire import (
    HOST_WIRE_VERSION,
    HostLaunch,
    RunSetup,
    WireVersionError,
)
from podmanager.vm.workload_runs import HostRuns


def _launch(**changes) -> HostLaunch:
    run = RunSetup(run_id="r", workload=Workload(entrypoint="-m pkg.main", requirements=["numpy"],
                                                 env={"A": "1"}), code_digest="ab" * 32)
    return HostLaunch(run=run, attempt=3, env={"JAX_PROCESS_ID": "1"}).model_copy(update=changes)


def test_a_launch_comes_back_equal_through_json_and_through_ray_pickling():
    launch = _launch()
    assert HostLaunch.model_validate_json(launch.model_dump_json()) == launch
    back = pickle.loads(pickle.dumps(launch))  # how Ray carries an actor call's arguments
    assert back == launch and back.run.workload.requirements == ["numpy"] and back.attempt == 3
    assert launch.version == launch.run.version == HOST_WIRE_VERSION


def test_a_launch_is_checked_where_it_is_made():
    run = _launch().run
    with pytest.raises(ValidationError, match="attempt"):
        HostLaunch(run=run, attempt=-1)
    with pytest.raises(ValidationError, match="env"):
        HostLaunch(run=run, attempt=0, env={"N": 2})
    with pytest.raises(ValidationError, match="workload_json"):
        RunSetup(run_id="r", workload_json="{}")  # no field beside the declared ones


def test_the_agent_refuses_a_record_of_another_wire_version(tmp_path):
    runs = HostRuns(tmp_path)
    newer = _launch(version=HOST_WIRE_VERSION + 1)
    with pytest.raises(WireVersionError, match=f"host-wire version {HOST_WIRE_VERSION + 1}"):
        runs.start(newer)
    with pytest.raises(WireVersionError):
        runs.setup(newer.run.model_copy(update={"version": HOST_WIRE_VERSION + 1}), None)
    assert runs.processes == {} and not (tmp_path / "runs").exists()  # nothing done


def test_the_attempt_is_the_records_not_the_environments(tmp_path):
    """The attempt's output file and progress file are named by the launch's attempt, whatever
    (if anything) its environment says."""
    runs = HostRuns(tmp_path)
    workload = Workload(command=[sys.executable, "-c", "print('hi')"], working_dir=None)
    runs.start(HostLaunch(run=RunSetup(run_id="r", workload=workload), attempt=4, env={}))
    runs.processes["r"].wait(30)
    assert runs.describe("r").attempt == 4
    assert runs.left_output("r", 4, 0) == b"hi\n"


def test_a_setup_whose_code_is_not_the_named_zip_fails_and_unpacks_nothing(tmp_path):
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("main.py", "print(1)\n")
    data = archive.getvalue()
    runs = HostRuns(tmp_path)
    other = RunSetup(run_id="r", workload=Workload(entrypoint="main.py"), code_digest="0" * 64)
    report = runs.setup(other, data)
    assert not report.ok and "0" * 64 in report.error and not runs.run_dir("r").exists()
    named = other.model_copy(update={"code_digest": hashlib.sha256(data).hexdigest()})
    assert runs.setup(named, data).ok and (runs.run_dir("r") / "working_dir" / "main.py").is_file()
