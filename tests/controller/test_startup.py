"""The TPU VM startup script as rendered: valid bash, everything pinned and quoted, no secret.

Every dry-run host boots by running it (tests/end_to_end/test_vm_boot.py); these check the rendering."""

from __future__ import annotations

import re
import subprocess

import pytest

from podmanager.controller.software import Software
from podmanager.controller.startup import (
    STARTUP_SCRIPT_KEY,
    TOKEN_SECRET_KEY,
    render_startup_script,
    startup_metadata,
)
from podmanager.core.errors import SpecError


def software(**overrides: object) -> Software:
    fields: dict[str, object] = {"python": "3.11.7", "ray": "2.60.0", "jax": "0.10.2", "uv": "0.13.9",
                                 "podmanager": "0.1.0+h0123456789", "podmanager_source": "gs://bkt/boot/podmanager.whl",
                                 "packages": (), "tpu": True}
    fields.update(overrides)
    return Software(**fields)  # type: ignore[arg-type]


def render(**overrides: object) -> str:
    return render_startup_script("demo", software(**overrides), "demo-ray-token")


def test_rendered_script_is_valid_bash_and_pins_the_controllers_versions() -> None:
    script = render()
    assert script.startswith("#!/bin/bash")
    assert "{{" not in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    assert "PYTHON_VERSION=3.11.7\n" in script and "UV_VERSION=0.13.9\n" in script
    assert "WANTED='python=3.11.7 ray=2.60.0 jax=0.10.2 podmanager=0.1.0+h0123456789'  #" in script
    assert "REQUIREMENTS=('ray[default]==2.60.0' 'jax[tpu]==0.10.2')" in script
    # No apt at boot, and the head's address is read from metadata on every try, never baked in.
    assert "apt-get" not in script and "--head-from-metadata" in script


def test_a_simulated_vm_gets_jax_without_libtpu() -> None:
    assert "REQUIREMENTS=('ray[default]==2.60.0' jax==0.10.2)" in render(tpu=False)


def test_extra_packages_are_quoted_and_change_the_install_key() -> None:
    plain, extra = software(), software(packages=("numpy<3", "six==1.16.0"))
    assert plain.install_key() != extra.install_key()
    assert "PACKAGES=('numpy<3' six==1.16.0)" in render_startup_script("demo", extra, "demo-ray-token")


def test_metadata_carries_the_secret_name_not_the_token() -> None:
    metadata = startup_metadata("demo", software(), "projects/my-proj/secrets/demo-ray-token")
    assert set(metadata) == {STARTUP_SCRIPT_KEY, TOKEN_SECRET_KEY, "enable-guest-attributes"}
    assert metadata[TOKEN_SECRET_KEY] == "projects/my-proj/secrets/demo-ray-token"


@pytest.mark.parametrize("cluster, secret, fields", [
    ("demo", "demo\nrm -rf /", {}),
    ("demo", "not a secret name", {}),
    ("Demo", "demo-ray-token", {}),
    ("demo", "demo-ray-token", {"podmanager_source": ""}),
    ("demo", "demo-ray-token", {"packages": ("six\nrm -rf /",)}),
])
def test_bad_values_are_refused(cluster: str, secret: str, fields: dict[str, object]) -> None:
    with pytest.raises(SpecError):
        render_startup_script(cluster, software(**fields), secret)


def test_values_are_shell_quoted() -> None:
    script = render(podmanager_source="https://example.com/podmanager-0.1.0-py3-none-any.whl?x=1&y=2")
    assert "PODMANAGER_SOURCE='https://example.com/podmanager-0.1.0-py3-none-any.whl?x=1&y=2'" in script


# A stand-in for systemd: `enable`/`disable` mark a unit to start at boot, `restart` starts it.
FAKE_SYSTEMCTL = """#!/bin/bash
case "$1" in
  daemon-reload) ;;
  enable) touch "$STATE/enabled-$2" ;;
  disable) rm -f "$STATE/enabled-${@: -1}" ;;
  restart | start) echo "$2" >>"$STATE/starts" ;;
esac
"""


def test_after_a_reboot_the_daemon_is_started_once(tmp_path) -> None:
    """At every boot Google's guest agent runs the startup script, and systemd starts the units
    that are enabled: the script's unit must be started by one of the two, never by both."""
    script = render_startup_script("demo", software(), "demo-channel-token", role="controller", channel_port=8443)
    keep_running = re.search(r"^keep_running\(\) \{.*?^\}$", script, re.DOTALL | re.MULTILINE)
    assert keep_running is not None
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin/systemctl").write_text(FAKE_SYSTEMCTL)
    (tmp_path / "bin/systemctl").chmod(0o755)
    (tmp_path / "units").mkdir()
    boots = f"""
log() {{ :; }}
ROOT=""
{keep_running.group(0)}
boot() {{
  for enabled in "$STATE"/enabled-*; do  # systemd, at boot
    [[ -e "$enabled" ]] && echo "${{enabled##*/enabled-}}" >>"$STATE/starts"
  done
  keep_running podmanager-controller "the daemon" /bin/true  # the startup script, at boot
}}
boot
echo reboot >>"$STATE/starts"
boot
"""
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "STATE": str(tmp_path), "HOME": str(tmp_path),
           "PODMANAGER_SYSTEMD_UNITS": str(tmp_path / "units")}
    subprocess.run(["bash", "-c", boots], env=env, check=True)
    first, second = (tmp_path / "starts").read_text().split("reboot\n")
    assert first.split() == ["podmanager-controller.service"]
    assert second.split() == ["podmanager-controller.service"]  # once after the reboot too
    assert "Restart=always" in (tmp_path / "units/podmanager-controller.service").read_text()
