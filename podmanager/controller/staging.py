"""Where the TPU VMs get podmanager from, and putting its wheel there.

podmanager is on no package index, so `up` ships a wheel of itself (`wheel.py`) to a Cloud
Storage folder the VMs read (`stage_root`): on Google Cloud through gcsfs; in a dry run into
the emulator's simulated bucket, the folder `$PODMANAGER_HOME/sim/storage/<bucket>/` that the
emulator serves to the simulated VMs over Cloud Storage's download route, so their startup
script fetches it exactly as it would from Google.

`resolve_software` turns the spec's `boot:` section into the `Software` every VM installs, with
its environment locked once (`boot_lock.py`) where the VMs install one.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from podmanager.controller.boot_lock import lock_for
from podmanager.controller.software import (
    Software,
    Versions,
    check_packages,
    controller_versions,
)
from podmanager.controller.wheel import build_wheel, wheel_version
from podmanager.core import paths
from podmanager.core.errors import PodmanagerError, SpecError
from podmanager.core.files import write_atomic
from podmanager.core.spec import ClusterSpec, PodmanagerSource

BOOT_FOLDER = "podmanager-boot"  # under a gs:// checkpoint root, when boot.stage is not given


def simulated_bucket(project: str) -> str:
    """The emulator's bucket of a simulated project, where a dry run stages its wheel."""
    return f"{project}-podmanager"


def stage_root(spec: ClusterSpec) -> str:
    """The gs:// folder `up` uploads podmanager's wheel to: boot.stage; else a folder beside
    the checkpoints when they are in Cloud Storage; else, in a dry run, the emulator's bucket."""
    if spec.boot.stage:
        return spec.boot.stage
    if spec.checkpoints and spec.checkpoints.startswith("gs://"):
        return f"{spec.checkpoints}/{BOOT_FOLDER}"
    if spec.simulated:
        return f"gs://{simulated_bucket(spec.project or '')}/boot"
    raise SpecError(
        "boot.stage: podmanager is on no package index, so `up` uploads a wheel of this podmanager for the TPU "
        "VMs to read, and this spec names no Cloud Storage folder for it",
        hint="set boot.stage: gs://BUCKET/PATH (or checkpoints: gs://...), or boot.podmanager to a version on "
             "your package index or a wheel's URL")


def staged_url(spec: ClusterSpec, wheel: Path) -> str:
    """The gs:// URL `wheel` has in the spec's stage folder (uploaded or not)."""
    return f"{stage_root(spec)}/{wheel.name}"


def stage_wheel(spec: ClusterSpec, wheel: Path) -> str:
    """The gs:// URL of `wheel` in the spec's stage folder, uploaded unless an object of its
    name is there already (a wheel's name carries its version, a built one's its content hash)."""
    url = staged_url(spec, wheel)
    if spec.simulated:
        _stage_simulated(url, wheel)
    else:
        _stage_in_cloud_storage(url, wheel, spec.project or "")
    return url


def check_boot(spec: ClusterSpec) -> None:
    """What can be wrong with the spec's `boot:` section, checked before `up` records or creates
    anything: the packages against the controller's pins, where a wheel would be staged, and
    that a local wheel is there."""
    boot = spec.boot
    check_packages(boot.packages, controller_versions())
    if boot.source in (PodmanagerSource.BUILT, PodmanagerSource.LOCAL_WHEEL):
        stage_root(spec)
    if boot.source is PodmanagerSource.LOCAL_WHEEL and not Path(boot.podmanager or "").is_file():
        raise SpecError(f"boot.podmanager: {boot.podmanager} is no file on this machine",
                        hint="build the wheel first, or leave boot.podmanager out to ship the podmanager running here")


def resolve_software(spec: ClusterSpec, *, stage: bool = True) -> Software:
    """What every VM of the spec's cluster installs: the controller's Python, Ray, JAX and uv,
    the podmanager `boot.podmanager` names (a wheel of the running one, built and staged, if
    it names none) and `boot.packages`, locked where the VMs install them. The wheel is staged
    last, so a package that cannot be resolved uploads nothing; `stage=False` stages nothing
    (`up`'s check before it changes the cloud: the lock is kept, so the real resolve reuses it)."""
    check_boot(spec)
    boot = spec.boot
    wheel: Path | None = None
    match boot.source:
        case PodmanagerSource.VERSION:
            version, source = boot.podmanager_version() or "", f"podmanager=={boot.podmanager}"
        case PodmanagerSource.URL:
            version, source = boot.podmanager_version() or "", boot.podmanager or ""
        case PodmanagerSource.LOCAL_WHEEL:
            wheel = Path(boot.podmanager or "")
            version, source = wheel_version(wheel), staged_url(spec, wheel)
        case PodmanagerSource.BUILT:
            wheel = build_wheel(paths.wheels_dir())
            version, source = wheel_version(wheel), staged_url(spec, wheel)
    software = Software.pinned_to_controller(podmanager=version, podmanager_source=source, packages=boot.packages,
                                             tpu=not spec.simulated, index_url=boot.index_url or "",
                                             extra_index_urls=boot.extra_index_urls)
    if vms_install(spec) or boot.packages:  # boot.packages: even a controller-image VM installs them
        software = replace(software, lock=lock_for(software, wheel, simulated=spec.simulated))
    if stage and wheel is not None:
        stage_wheel(spec, wheel)
    return software


def wanted_versions(spec: ClusterSpec) -> Versions:
    """What a VM booted for the spec now would report (`Software.versions`), worked out without
    building, staging or locking anything: the controller's Python, Ray and JAX, and the
    podmanager `boot.podmanager` names (the running one's content version if it names none)."""
    running = controller_versions()
    if spec.boot.source is PodmanagerSource.BUILT:
        return running  # a wheel of the running podmanager is versioned by its content
    return replace(running, podmanager=spec.boot.podmanager_version() or "")


def vms_install(spec: ClusterSpec) -> bool:
    """Whether the spec's VMs install their environment at boot: real ones do; simulated ones
    only from a bare image (the others start from the controller's own environment)."""
    return not spec.simulated or (spec.simulation.boot_hosts and spec.simulation.vm_image == "bare")


def _split(url: str) -> tuple[str, str]:
    bucket, _, name = url.removeprefix("gs://").partition("/")
    return bucket, name


def _stage_simulated(url: str, wheel: Path) -> None:
    target = paths.storage_object(*_split(url))
    if target.is_file():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(target, wheel.read_bytes())  # a VM downloading it meanwhile gets none or all of it


def _stage_in_cloud_storage(url: str, wheel: Path, project: str) -> None:
    import gcsfs  # imported here: it loads slowly, and only an upload to Google needs it

    hint = "check that the bucket exists and that your credentials may write to it (boot.stage names the folder)"
    try:
        storage = gcsfs.GCSFileSystem(project=project)
        if not storage.exists(url):
            storage.put_file(str(wheel), url)  # an object appears whole when its upload completes
    except FileNotFoundError:  # gcsfs's answer to a 404 on the upload: there is no such bucket
        raise PodmanagerError(f"cannot upload podmanager's wheel to {url}: the bucket {_split(url)[0]} does not "
                              "exist", hint=hint) from None
    except Exception as failed:  # gcsfs raises OSError, its HttpError, auth and transport errors alike
        raise PodmanagerError(f"cannot upload podmanager's wheel to {url}: {failed}", hint=hint) from failed
