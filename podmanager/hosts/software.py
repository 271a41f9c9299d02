"""What every TPU VM of a cluster runs, pinned to the controller's: the record `up` hands to
a VM's install step, and the versions a process reports about itself.

Ray refuses a worker node whose Ray or Python version differs from the head's (Python at
patch level), so a VM gets exactly the controller's, never "the newest"; JAX and uv are pinned
alike, so a program behaves on the hosts as it was checked here.
"""

from __future__ import annotations

import hashlib
import json
import platform
from dataclasses import asdict, dataclass
from importlib import metadata

from podmanager.core.version import __version__


@dataclass(frozen=True)
class Versions:
    """The versions one process runs (the controller's, or a VM's as it reports them)."""

    python: str  # in full: 3.11.7
    ray: str
    jax: str
    podmanager: str  # the code's own version (podmanager.core.version), a wheel's local label aside


def controller_versions() -> Versions:
    """The versions this process runs."""
    return Versions(python=platform.python_version(), ray=metadata.version("ray"), jax=metadata.version("jax"),
                    podmanager=__version__)


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

    @classmethod
    def pinned_to_controller(cls, *, podmanager: str, podmanager_source: str,
                             packages: tuple[str, ...] | list[str] = ()) -> Software:
        """The controller's Python, Ray, JAX and uv, with the given podmanager and packages."""
        running = controller_versions()
        return cls(python=running.python, ray=running.ray, jax=running.jax, uv=metadata.version("uv"),
                   podmanager=podmanager, podmanager_source=podmanager_source, packages=tuple(packages))

    def requirements(self, tpu: bool) -> list[str]:
        """What the VM's installer is given, podmanager first. A gs:// wheel is named as is: where
        the VM downloads it to is the install step's business. `tpu`: JAX with libtpu."""
        jax = f"jax[tpu]=={self.jax}" if tpu else f"jax=={self.jax}"
        return [self.podmanager_source, f"ray[default]=={self.ray}", jax, *self.packages]

    def install_key(self) -> str:
        """A short hash of everything that decides the install: a VM whose stamp equals it has
        this software already and installs nothing."""
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]
