"""`controller/software.py`: what every TPU VM installs, pinned to the controller, and the key that
says whether a VM has it already."""

from __future__ import annotations

import dataclasses
import platform
from importlib import metadata

import pytest

from podmanager.controller.software import (
    Software,
    check_packages,
    content_version,
    controller_versions,
)
from podmanager.core.errors import SpecError
from podmanager.core.records import Versions
from podmanager.core.version import __version__


def software(**changes: object) -> Software:
    base = Software(python="3.11.7", ray="2.60.0", jax="0.10.2", uv="0.13.9", podmanager="0.1.0+h0123456789",
                    podmanager_source="gs://b/boot/podmanager-0.1.0+h0123456789-py3-none-any.whl",
                    packages=("optax==0.2.4",))
    return dataclasses.replace(base, **changes)


def test_ray_and_jax_are_pinned_with_libtpu_only_on_a_real_tpu() -> None:
    assert software().pinned_requirements() == ["ray[default]==2.60.0", "jax[tpu]==0.10.2"]
    assert software(tpu=False).pinned_requirements() == ["ray[default]==2.60.0", "jax==0.10.2"]
    assert software().versions().line() == "python=3.11.7 ray=2.60.0 jax=0.10.2 podmanager=0.1.0+h0123456789"


def test_the_install_key_changes_with_anything_that_decides_the_install() -> None:
    key = software().install_key()
    assert key == software().install_key() and len(key) == 16
    changes = [{"python": "3.11.8"}, {"ray": "2.61.0"}, {"jax": "0.10.3"}, {"uv": "0.14.0"},
               {"podmanager": "0.1.0+h9999999999"}, {"podmanager_source": "podmanager==0.1.0"},
               {"packages": ()}, {"packages": ("optax==0.2.5",)}, {"tpu": False}]
    keys = {software(**change).install_key() for change in changes}
    assert key not in keys and len(keys) == len(changes)


def test_pinned_to_the_controller_is_what_this_process_runs() -> None:
    running = controller_versions()
    assert running == Versions(python=platform.python_version(), ray=metadata.version("ray"),
                               jax=metadata.version("jax"), podmanager=content_version())
    assert running.podmanager.startswith(__version__ + "+h")  # by content, as its wheel is named
    assert running.python.count(".") == 2  # in full: Ray compares it at patch level

    pinned = Software.pinned_to_controller(podmanager="0.2.0", podmanager_source="podmanager==0.2.0",
                                           packages=["optax"])
    assert (pinned.python, pinned.ray, pinned.jax, pinned.uv) == (
        running.python, running.ray, running.jax, metadata.version("uv"))
    assert pinned.packages == ("optax",)  # a tuple: the record is frozen and hashable
    hash(pinned)


RUNNING = Versions(python="3.11.7", ray="2.60.0", jax="0.10.2", podmanager="0.1.0+h0123456789")


def test_packages_that_agree_with_the_controllers_ray_and_jax_are_accepted() -> None:
    check_packages(["optax==0.2.4", "ray[serve]", "Ray==2.60.0", "jax>=0.10", "flax"], RUNNING)


@pytest.mark.parametrize(("package", "says"), [
    ("ray==2.50.0", "boot.packages[1] ('ray==2.50.0') conflicts with ray==2.60.0"),
    ("Ray[default]<2.60", "boot.packages[1] ('Ray[default]<2.60') conflicts with ray==2.60.0"),
    ("jax==0.9.0", "boot.packages[1] ('jax==0.9.0') conflicts with jax==0.10.2"),
    ("podmanager==0.2.0", "boot.packages[1] ('podmanager==0.2.0'): the VMs' podmanager is set by boot.podmanager"),
])
def test_a_package_against_the_pins_is_refused_naming_the_entry_and_the_fix(package: str, says: str) -> None:
    with pytest.raises(SpecError) as refused:
        check_packages(["optax==0.2.4", package], RUNNING)
    assert says in str(refused.value)
    assert refused.value.hint


def test_a_hosts_reported_versions_are_judged_as_the_startup_script_judges_them() -> None:
    host = Versions.parse("python=3.11.7 ray=2.60.0 jax=0.10.2 podmanager=0.1.0+haaaa")
    assert host == Versions("3.11.7", "2.60.0", "0.10.2", "0.1.0+haaaa")
    assert Versions.parse("python=3.11.7 ray=2.60.0 jax=0.10.2") is None  # nothing to judge by
    assert Versions("3.11.7", "2.60.0", "0.10.2", "0.1.0+haaaa").differences(host) == []
    assert Versions("3.11.7", "2.60.0", "0.10.2", "0.1.0").differences(host) == []  # a release: any build of it
    assert Versions("3.11.7", "2.60.0", "0.10.2", "0.1.0+hbbbb").differences(host) == [
        "podmanager 0.1.0+haaaa -> 0.1.0+hbbbb"]
    assert Versions("3.11.8", "2.61.0", "0.10.2", "0.2.0").differences(host) == [
        "python 3.11.7 -> 3.11.8", "ray 2.60.0 -> 2.61.0", "podmanager 0.1.0+haaaa -> 0.2.0"]
