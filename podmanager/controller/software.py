"""What every TPU VM of a cluster runs, pinned to the controller's: the record `up` hands to
a VM's install step, and the versions a process reports about itself.

Ray refuses a worker node whose Ray or Python version differs from the head's (Python at
patch level), so a VM gets exactly the controller's, never "the newest"; JAX and uv are pinned
alike, so a program behaves on the hosts as it was checked here. podmanager's own version is
its content (`content_version`: the release and a hash of the package's files, as a built
wheel is named), so a VM running an edited tree is told apart from one running the release.

    python -m podmanager.controller.software    # this environment's versions, on one line

is what the startup script compares with the line it pins (`Versions.line`).
"""

from __future__ import annotations

import hashlib
import json
import platform
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from podmanager.controller.wheel import RUNNING_PACKAGE, files_hash, package_files
from podmanager.core.errors import SpecError
from podmanager.core.records import Versions
from podmanager.core.version import __version__


@lru_cache(maxsize=1)
def content_version() -> str:
    """The running podmanager's release with a hash of its files, as its wheel is versioned."""
    return f"{__version__}+h{files_hash(package_files(RUNNING_PACKAGE))}"


def controller_versions() -> Versions:
    """The versions this process runs."""
    return Versions(python=platform.python_version(), ray=metadata.version("ray"), jax=metadata.version("jax"),
                    podmanager=content_version())


def check_packages(packages: Sequence[str], running: Versions) -> None:
    """Refuse a `boot.packages` entry that asks for another Ray or JAX than `running` (the
    controller's, which every VM gets: Ray refuses a worker of another version) or names
    podmanager (`boot.podmanager` says which one), before anything is created."""
    # (A jaxlib against jax's pin fails the VM's install, which its boot status then names.)
    pinned = {"ray": running.ray, "jax": running.jax}
    for index, text in enumerate(packages):
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        field = f"boot.packages[{index}] ({text!r})"
        if name == "podmanager":
            raise SpecError(f"{field}: the VMs' podmanager is set by boot.podmanager, not boot.packages",
                            hint="move it to boot.podmanager (a version, a wheel's URL or path), or remove it "
                                 "to ship the podmanager running here")
        if name in pinned and not requirement.specifier.contains(pinned[name], prereleases=True):
            raise SpecError(f"{field} conflicts with {name}=={pinned[name]}, which every VM gets because the "
                            "controller runs it (Ray refuses a worker whose versions differ from the head's)",
                            hint=f"remove the entry (or write {name}=={pinned[name]}), or run podmanager from an "
                                 f"environment with the {name} you want")


@dataclass(frozen=True)
class Software:
    """What every VM of a cluster installs: the controller's Python, Ray, JAX and uv, the
    podmanager it is given, and the spec's extra packages."""

    python: str  # the interpreter, in full (3.11.7): uv installs exactly this one
    ray: str
    jax: str
    uv: str
    podmanager: str  # the version the VM will have (a built wheel's carries its +h<hash> label)
    podmanager_source: str  # podmanager==0.2.0, or an https:// or gs:// URL of a wheel
    packages: tuple[str, ...] = ()  # boot.packages: requirements every host gets
    tpu: bool = True  # JAX with libtpu; a simulated VM's chips are CPU devices
    lock: str = ""  # every package of the environment, pinned once (`boot_lock.py`); "": none
    index_url: str = ""  # boot.index_url: the index the VM's pip and uv use ("": the image's, else PyPI)
    extra_index_urls: tuple[str, ...] = ()  # boot.extra_index_urls

    @classmethod
    def pinned_to_controller(cls, *, podmanager: str, podmanager_source: str,
                             packages: tuple[str, ...] | list[str] = (), tpu: bool = True, index_url: str = "",
                             extra_index_urls: tuple[str, ...] | list[str] = ()) -> Software:
        """The controller's Python, Ray, JAX and uv, with the given podmanager, packages and index."""
        running = controller_versions()
        return cls(python=running.python, ray=running.ray, jax=running.jax, uv=metadata.version("uv"),
                   podmanager=podmanager, podmanager_source=podmanager_source, packages=tuple(packages), tpu=tpu,
                   index_url=index_url, extra_index_urls=tuple(extra_index_urls))

    def versions(self) -> Versions:
        """What a VM with this software reports (a version-pinned podmanager adds its own label)."""
        return Versions(python=self.python, ray=self.ray, jax=self.jax, podmanager=self.podmanager)

    def pinned_requirements(self) -> list[str]:
        """Ray and JAX at the controller's versions (podmanager and the packages are given apart)."""
        jax = "jax[tpu]" if self.tpu else "jax"
        return [f"ray[default]=={self.ray}", f"{jax}=={self.jax}"]

    def install_key(self) -> str:
        """A short hash of everything that decides the install: a VM whose stamp equals it has
        this software already and installs nothing."""
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


if __name__ == "__main__":
    print(controller_versions().line())
