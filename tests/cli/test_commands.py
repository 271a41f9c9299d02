"""The CLI through typer's CliRunner: commands, JSON output, errors and exit codes."""

import json
import os

import pytest
from sim_view import sim_nodes
from typer.testing import CliRunner

import podmanager
from podmanager.cli import app

runner = CliRunner()

SPEC = """
name: clitest
zones: [zone-a, zone-b]
slices:
  - accelerator: v4-16
    count: 2
simulation:
  create_latency_s: 0.01
  delete_latency_s: 0.01
  boot_hosts: false
"""


@pytest.fixture
def spec_file(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC)
    return path


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], prog_name="podmanager")


def test_up_status_events_down(spec_file):
    result = invoke("up", "-f", spec_file, "--dry-run")
    assert result.exit_code == 0, result.output
    assert "clitest-s1" in result.output and "READY" in result.output

    status = json.loads(invoke("status", "-c", "clitest", "--json").output)
    assert status["name"] == "clitest" and status["backend"] == "simulated"
    assert [(s["name"], s["accelerator"], s["zone"], s["state"], s["hosts"]) for s in status["slices"]] == [
        ("clitest-s0", "v4-16", "zone-a", "READY", 2), ("clitest-s1", "v4-16", "zone-a", "READY", 2)]

    events = json.loads(invoke("events", "--json").output)  # the only cluster: -c may be left out
    assert [e["kind"] for e in events].count("slice_ready") == 2

    result = invoke("down", "-c", "clitest")
    assert result.exit_code == 0, result.output
    assert sim_nodes("podmanager-sim") == []
    assert invoke("down", "-c", "clitest", "--dry-run").exit_code == 0  # a second down is fine


def test_bad_spec_is_refused_with_the_field_and_exit_code_2(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(SPEC.replace("v4-16", "v4-12"))
    result = invoke("up", "-f", path, "--dry-run")
    assert result.exit_code == 2
    assert "slices[0].accelerator: 'v4-12' is not a TPU type; did you mean v4-16?" in result.output
    assert sim_nodes("podmanager-sim") == []


def test_a_reservation_on_a_spot_slice_is_refused_with_the_field_and_exit_code_2(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(SPEC.replace("    count: 2", "    count: 2\n    queued: true\n    capacity: spot\n    reservation: mine"))
    result = invoke("up", "-f", path, "--dry-run")
    assert result.exit_code == 2, result.output
    assert "slices[0].reservation: a reservation serves only capacity: reserved" in result.output
    assert sim_nodes("podmanager-sim") == []


def test_a_boot_package_against_the_controllers_ray_is_refused_before_anything_starts(tmp_path):
    from importlib import metadata

    from podmanager.core import paths

    path = tmp_path / "pins.yaml"  # hosts that boot: the VMs would install boot.packages
    path.write_text("name: pins\nslices: [{accelerator: v4-8}]\nboot: {packages: [optax, ray==2.0.0]}\n")
    result = invoke("up", "-f", path, "--dry-run")
    assert result.exit_code == 2, result.output
    assert f"boot.packages[1] ('ray==2.0.0') conflicts with ray=={metadata.version('ray')}" in result.output
    assert invoke("status", "-c", "pins").exit_code == 2  # nothing was recorded
    assert not list((paths.home() / "sim").glob("emulators/*.json"))  # nor an emulator started


def test_a_bad_controller_section_is_refused_before_anything_starts(tmp_path):
    from podmanager.core import paths

    path = tmp_path / "vm.yaml"
    path.write_text(SPEC + "controller: {local: false, caller: 10.0.0.0/8}\n")
    result = invoke("up", "-f", path, "--dry-run")
    assert result.exit_code == 2, result.output
    assert "controller.caller" in result.output and "is not one address" in result.output
    assert invoke("status", "-c", "clitest").exit_code == 2  # nothing was recorded
    assert not list((paths.home() / "sim").glob("emulators/*.json"))  # nor an emulator started


def test_missing_file_and_unknown_cluster(tmp_path):
    result = invoke("up", "-f", tmp_path / "nope.yaml", "--dry-run")
    assert result.exit_code == 2 and "--file: cannot read" in result.output
    result = invoke("status", "-c", "ghost")
    assert result.exit_code == 2 and "no cluster named 'ghost'" in result.output


def test_gcp_without_credentials_fails_at_once_and_creates_nothing(spec_file, monkeypatch, tmp_path):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "none.json"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "some-project")
    monkeypatch.delenv("CLOUDSDK_CONFIG", raising=False)
    # (A spec the VMs could boot with: a `boot:` without a stage would be refused first.)
    spec_file.write_text(spec_file.read_text() + "boot: {stage: gs://my-bucket/boot}\n")
    result = invoke("up", "-f", spec_file)
    assert result.exit_code != 0
    assert "gcloud auth application-default login" in result.output
    assert "--dry-run" in result.output
    assert invoke("status", "-c", "clitest").exit_code == 2  # nothing was recorded


def test_accelerators_json_and_table():
    items = json.loads(invoke("accelerators", "--json").output)
    v4_16 = next(i for i in items if i["name"] == "v4-16")
    assert (v4_16["chips"], v4_16["hosts"], v4_16["chips_per_host"], v4_16["topology"]) == (8, 2, 4, "2x2x2")
    assert v4_16["runtime_version"] == "tpu-ubuntu2204-base"
    assert next(i for i in items if i["name"] == "v5litepod-16")["runtime_version"] == "v2-alpha-tpuv5-lite"
    table = invoke("accelerators", "-g", "v6e").output
    assert "v6e-256" in table and "v4-8" not in table
    assert "runtime version" in " ".join(table.split()) and "v2-alpha-tpuv6e" in table
    assert invoke("accelerators", "-g", "v9").exit_code == 2


def test_help_lists_every_verb():
    output = invoke("--help").output
    for verb in ("up", "run", "serve", "status", "logs", "events", "down", "emulator", "accelerators", "demo"):
        assert verb in output


def test_bare_podmanager_prints_help_and_exits_0():
    result = invoke()
    assert result.exit_code == 0, result.output
    assert "Usage: podmanager" in result.output and "run" in result.output


def test_version_and_short_help():
    from podmanager import __version__

    result = invoke("--version")
    assert (result.exit_code, result.output.strip()) == (0, f"podmanager {__version__}")
    assert invoke("-h").output == invoke("--help").output
    assert invoke("run", "-h").exit_code == 0


@pytest.mark.parametrize("verb", [["up"], ["serve"], ["status"], ["down"], ["run"], ["runs"], ["attach"], ["cancel"],
                                  ["logs"], ["events"], ["ray-env"], ["demo"], ["accelerators"], ["emulator"],
                                  ["sim", "preempt"], ["sim", "hang"], ["sim", "fail-create"],
                                  ["sim", "inject"], []])
def test_flags_show_no_placeholder_in_help(verb):
    output = invoke(*verb, "--help").output
    assert "<bool>" not in output
    assert "--help" in output


def test_run_usage_names_the_program_and_its_arguments():
    output = invoke("run", "--help").output
    assert "Usage: podmanager run [OPTIONS] PROGRAM [ARGS]..." in " ".join(output.split())


def test_logs_follows_with_capital_f_and_f_means_only_file():
    assert "-F" in invoke("logs", "--help").output
    result = invoke("logs", "-f")
    assert result.exit_code == 2 and "No such option: -f" in result.output
    for verb in ("up", "down"):
        assert "--file" in invoke(verb, "--help").output


def test_an_unknown_spec_field_suggests_the_close_one(tmp_path):
    path = tmp_path / "typo.yaml"
    path.write_text(SPEC.replace("count: 2", "cuont: 2"))
    result = invoke("up", "-f", path, "--dry-run")
    assert result.exit_code == 2
    assert "slices[0].cuont: unknown field; did you mean count?" in result.output
    assert sim_nodes("podmanager-sim") == []


def test_sim_preempt_takes_the_slice_as_the_user_sees_it(spec_file):
    assert invoke("up", "-f", spec_file, "--dry-run").exit_code == 0
    result = invoke("sim", "preempt", "-c", "clitest", "--slice", "clitest-s1")
    assert result.exit_code == 0, result.output
    states = {n.name: n.state.value for n in sim_nodes("podmanager-sim")}
    assert states == {"clitest-s0": "READY", "clitest-s1": "TERMINATED"}  # an on-demand slice's preemption
    wrong = invoke("sim", "preempt", "-c", "clitest", "--slice", "demo-s0")
    assert wrong.exit_code == 2 and "demo-s0 is not a node of cluster clitest" in wrong.output
    assert invoke("down", "-c", "clitest").exit_code == 0


def test_ray_env_without_ray_hosts_says_why(spec_file):
    assert invoke("up", "-f", spec_file, "--dry-run").exit_code == 0
    result = invoke("ray-env", "-c", "clitest")
    assert result.exit_code != 0 and "boot_hosts: false" in result.output
    assert json.loads(invoke("status", "-c", "clitest", "--json").output)["ray"] is None
    assert invoke("down", "-c", "clitest").exit_code == 0


def test_serve_refuses_bad_flags_with_exit_2_before_anything_starts(spec_file, tmp_path):
    assert invoke("up", "-f", spec_file, "--dry-run").exit_code == 0
    (tmp_path / "model.py").write_text("")
    cases = [(["--follow-checkpoints"], "--follow-checkpoints: the service has no checkpoint dir"),
             (["--replicas", "3"], "--replicas 3: each replica is one slice and there are 2"),
             (["--queue-timeout", "0"], "--queue-timeout 0"),
             ([], "boot_hosts is false")]
    for flags, message in cases:
        result = invoke("serve", "-c", "clitest", "--working-dir", tmp_path, *flags, "model.py")
        assert result.exit_code == 2 and message in result.output, (flags, result.output)
    assert json.loads(invoke("runs", "-c", "clitest", "--json").output) == []
    assert invoke("down", "-c", "clitest").exit_code == 0


def test_the_installed_command_flushes_its_output_and_exit_code_through_a_pipe(tmp_path):
    """`main` ends the process at once (os._exit): what it printed must still reach a pipe."""
    import subprocess
    import sys

    env = {**os.environ, "PODMANAGER_HOME": str(tmp_path)}
    version = subprocess.run([sys.executable, "-m", "podmanager", "--version"], capture_output=True, text=True,
                             env=env, timeout=60)
    assert (version.returncode, version.stdout.strip()) == (0, f"podmanager {podmanager.__version__}")
    items = subprocess.run([sys.executable, "-m", "podmanager", "accelerators", "--json"], capture_output=True,
                           text=True, env=env, timeout=60)
    assert items.returncode == 0 and len(json.loads(items.stdout)) > 20  # the whole JSON, not a cut-off buffer
    missing = subprocess.run([sys.executable, "-m", "podmanager", "status", "-c", "ghost"], capture_output=True,
                             text=True, env=env, timeout=60)
    assert missing.returncode == 2 and "no cluster named 'ghost'" in missing.stdout + missing.stderr
