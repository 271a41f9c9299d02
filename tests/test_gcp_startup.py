"""The TPU VM startup script: rendered, then really run by bash with stand-ins for gcloud/curl/python."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from podmanager.cloud.gcp.startup import (
    STARTUP_SCRIPT_KEY,
    render_startup_script,
    startup_metadata,
    template_text,
)
from podmanager.core.errors import SpecError

REPO = Path(__file__).resolve().parents[1]
TOKEN = "s3cret-ray-token-value"
HEAD = "10.128.0.2:6379"


def render(**overrides: str) -> str:
    args = {"cluster": "demo", "head_address": HEAD, "version": "0.1.0", "token_secret": "demo-ray-token"}
    args.update(overrides)
    return render_startup_script(**args)


def test_template_is_the_same_from_package_and_repository() -> None:
    assert template_text() == (REPO / "infra" / "startup-script.sh.tmpl").read_text()


def test_rendered_script_is_valid_bash_and_pins_everything() -> None:
    script = render()
    assert script.startswith("#!/bin/bash")
    assert "{{" not in script
    assert "CLUSTER=demo\n" in script and f"HEAD_ADDRESS={HEAD}\n" in script
    assert "PODMANAGER_VERSION=0.1.0\n" in script and "TOKEN_SECRET=demo-ray-token\n" in script
    assert "python -m podmanager.hosts.join" in script or "-m podmanager.hosts.join" in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_metadata_carries_the_secret_name_not_the_token() -> None:
    metadata = startup_metadata("demo", HEAD, "0.1.0", "projects/my-proj/secrets/demo-ray-token")
    assert set(metadata) == {STARTUP_SCRIPT_KEY, "podmanager-token-secret"}
    assert metadata["podmanager-token-secret"] == "projects/my-proj/secrets/demo-ray-token"


@pytest.mark.parametrize(
    "overrides",
    [
        {"token_secret": "demo\nrm -rf /"},
        {"token_secret": "not a secret name"},
        {"head_address": "10.0.0.1"},
        {"head_address": "$(reboot):1"},
        {"cluster": "Demo"},
        {"version": ""},
    ],
)
def test_bad_values_are_refused(overrides: dict[str, str]) -> None:
    with pytest.raises(SpecError):
        render(**overrides)


def test_values_are_shell_quoted() -> None:
    script = render(version="https://example.com/podmanager-0.1.0-py3-none-any.whl?x=1&y=2")
    assert "PODMANAGER_VERSION='https://example.com/podmanager-0.1.0-py3-none-any.whl?x=1&y=2'\n" in script


# ---------------------------------------------------------------------- running the script


def _stub(path: Path, body: str) -> None:
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(0o755)


@pytest.fixture
def vm(tmp_path: Path) -> dict[str, Path]:
    """A fake VM: a PATH of only the tools the script needs, a venv whose python logs its arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "python3", "mkdir", "chmod", "mv", "rm", "dirname", "basename", "cat"):
        os.symlink(shutil.which(tool), bin_dir / tool)  # type: ignore[arg-type]
    _stub(bin_dir / "sleep", "exit 0\n")  # the fetch retry's backoff takes no time here
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    _stub(venv / "bin" / "python", f'echo "$*" >> {tmp_path}/python.log\n')
    _stub(
        bin_dir / "curl",
        'for a in "$@"; do url="$a"; done\n'
        'case "$url" in\n'
        '  */project/project-id) echo my-proj ;;\n'
        '  */service-accounts/default/token) echo \'{"access_token": "ya29.vm", "expires_in": 3599}\' ;;\n'
        f'  https://secrets.test/projects/my-proj/secrets/demo-ray-token/versions/latest:access)\n'
        f'    [[ " $* " == *"Authorization: Bearer ya29.vm"* ]] || exit 22\n'
        f'    echo "{{\\"payload\\": {{\\"data\\": \\"$(printf %s {TOKEN} | base64)\\"}}}}" ;;\n'
        '  *) exit 22 ;;\n'
        'esac\n',
    )
    return {"root": tmp_path, "bin": bin_dir, "venv": venv, "token": tmp_path / "etc" / "ray-token"}


def run_script(vm: dict[str, Path], script: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": str(vm["bin"]),
        "PODMANAGER_VENV": str(vm["venv"]),
        "PODMANAGER_TOKEN_FILE": str(vm["token"]),
        "PODMANAGER_METADATA_URL": "http://metadata.test/computeMetadata/v1",
        "PODMANAGER_SECRETS_API": "https://secrets.test",
    }
    return subprocess.run([str(vm["bin"] / "bash"), "-c", script], env=env, text=True, capture_output=True, timeout=30)


def assert_joined_with_token(vm: dict[str, Path], result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, result.stderr
    assert vm["token"].read_text() == TOKEN
    assert stat.S_IMODE(vm["token"].stat().st_mode) == 0o600
    calls = (vm["root"] / "python.log").read_text().splitlines()
    assert calls[-1] == f"-m podmanager.hosts.join --address {HEAD} --token-file {vm['token']}"
    assert TOKEN not in result.stdout + result.stderr


def test_script_fetches_the_token_with_gcloud_and_joins(vm: dict[str, Path]) -> None:
    _stub(
        vm["bin"] / "gcloud",
        'if [[ "$*" == "secrets versions access projects/my-proj/secrets/demo-ray-token/versions/latest --quiet" ]]; '
        f"then printf %s {TOKEN}; else exit 1; fi\n",
    )
    assert_joined_with_token(vm, run_script(vm, render()))


def test_script_fetches_the_token_over_rest_without_gcloud(vm: dict[str, Path]) -> None:
    os.symlink(shutil.which("base64"), vm["bin"] / "base64")  # type: ignore[arg-type]
    os.symlink(shutil.which("printf") or "/usr/bin/printf", vm["bin"] / "printf")
    assert_joined_with_token(vm, run_script(vm, render()))


def test_script_does_not_join_without_the_token(vm: dict[str, Path]) -> None:
    _stub(vm["bin"] / "gcloud", "echo 'PERMISSION_DENIED: secretmanager.versions.access' >&2; exit 1\n")
    result = run_script(vm, render())
    assert result.returncode == 1
    assert "roles/secretmanager.secretAccessor" in result.stderr
    assert not vm["token"].exists()
    assert "podmanager.hosts.join" not in (vm["root"] / "python.log").read_text()


def test_script_installs_the_pinned_version_into_a_fresh_venv(vm: dict[str, Path]) -> None:
    shutil.rmtree(vm["venv"])
    (vm["bin"] / "python3").unlink()
    log = vm["root"] / "python.log"
    # A system python3 that is new enough and makes a venv whose python logs what it is asked to do.
    _stub(
        vm["bin"] / "python3",
        'if [[ "$1" == "-m" && "$2" == "venv" ]]; then\n'
        '  mkdir -p "$3/bin"\n'
        f'  printf \'#!/bin/bash\\necho "$*" >> {log}\\n[[ "$1" != "-c" ]]\\n\' > "$3/bin/python"\n'
        '  chmod +x "$3/bin/python"\n'
        "fi\n",
    )
    _stub(vm["bin"] / "gcloud", f"printf %s {TOKEN}\n")
    for tool in ("printf",):
        if not (vm["bin"] / tool).exists():
            os.symlink(shutil.which(tool) or "/usr/bin/printf", vm["bin"] / tool)

    result = run_script(vm, render(version="0.1.0"))

    assert_joined_with_token(vm, result)
    calls = log.read_text().splitlines()
    assert "-m pip install --quiet podmanager==0.1.0 jax[tpu]" in calls
    assert calls.index("-m pip install --quiet podmanager==0.1.0 jax[tpu]") < len(calls) - 1  # before the join


def test_script_gives_the_boot_a_home_when_it_has_none(vm: dict[str, Path]) -> None:
    """Units started at boot have no HOME; pip, gcloud and Ray write under it, so the script sets root's."""
    _stub(vm["bin"] / "gcloud", f'echo "gcloud HOME=$HOME" >> {vm["root"]}/home.log; printf %s {TOKEN}\n')
    _stub(vm["venv"] / "bin" / "python", f'echo "python HOME=$HOME" >> {vm["root"]}/home.log\n')

    result = run_script(vm, render())  # run_script's environment has no HOME

    assert result.returncode == 0, result.stderr
    # The install check, the token's fetch and the join: every step sees it.
    assert (vm["root"] / "home.log").read_text().splitlines() == [
        "python HOME=/root", "gcloud HOME=/root", "python HOME=/root"]


def test_script_keeps_a_home_it_is_given(vm: dict[str, Path]) -> None:
    _stub(vm["bin"] / "gcloud", f"printf %s {TOKEN}\n")
    _stub(vm["venv"] / "bin" / "python", f'echo "python HOME=$HOME" >> {vm["root"]}/home.log\n')
    script = f"export HOME={vm['root']}/home\n" + render()

    result = run_script(vm, script)

    assert result.returncode == 0, result.stderr
    assert set((vm["root"] / "home.log").read_text().splitlines()) == {f"python HOME={vm['root']}/home"}
