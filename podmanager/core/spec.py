"""The cluster spec a user writes: pydantic models, YAML loading, error messages.

Every validation error is reported as one `SpecError` whose lines each name the field
path (`slices[1].accelerator`) and what is allowed, before anything is created.
"""

from __future__ import annotations

import difflib
import io
import ipaddress
import os
import re
import typing
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from packaging.requirements import InvalidRequirement, Requirement
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from podmanager.core import catalog
from podmanager.core.errors import SpecError
from podmanager.core.faults import (  # A_DAY_S: the bound of every simulated delay
    A_DAY_S,
    Fault,
    explain,
)
from podmanager.runtime.checkpoints import is_url

NAME_PATTERN = re.compile(r"[a-z]([-a-z0-9]{0,28}[a-z0-9])?")  # always fullmatch: '$' lets a newline through
SIMULATED_PROJECT = "podmanager-sim"
SIMULATED_ZONES = ["sim-zone-a", "sim-zone-b", "sim-zone-c"]
# Google's network forms (Cloud TPU's "Configure networking and access"): a name, or its
# resource path in a project (another project's, for a Shared VPC). Names are RFC 1035 labels.
_GCE_NAME = r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?"
_PROJECT = r"[a-z0-9](?:[-a-z0-9.:]*[a-z0-9])?"  # an id (domain-scoped ones have '.' and ':') or a number
_NETWORK = re.compile(rf"{_GCE_NAME}|projects/{_PROJECT}/global/networks/{_GCE_NAME}")
_SUBNETWORK = re.compile(
    rf"{_GCE_NAME}|projects/{_PROJECT}/regions/(?P<region>[a-z]+-[a-z]+[0-9]+)/subnetworks/{_GCE_NAME}")
_TAG = re.compile(_GCE_NAME)
_SERVICE_ACCOUNT = re.compile(r"[a-z0-9][-a-z0-9_.+]*@[a-z0-9][-a-z0-9.]*\.[a-z]{2,}")
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
_RESERVATION = re.compile(rf"{_GCE_NAME}|projects/{_PROJECT}/locations/{_GCE_NAME}/reservations/{_GCE_NAME}")
# A project id as Resource Manager allows it: 6-30 of [a-z0-9-], a letter first, no '-' last (a
# legacy domain-scoped id, example.com:my-project, has its domain in front). It names files
# under $PODMANAGER_HOME on a dry run, so nothing else may pass.
_PROJECT_ID = re.compile(r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*:)?[a-z][-a-z0-9]{4,28}[a-z0-9]")
_ZONE = re.compile(_GCE_NAME)  # us-central2-b; a simulated one, sim-zone-a
_RUNTIME_VERSION = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,126}[A-Za-z0-9])?")  # tpu-vm-tf-2.15.0-pjrt
_LABEL_KEY = re.compile(r"[a-z][-_a-z0-9]{0,62}")
_LABEL_VALUE = re.compile(r"[-_a-z0-9]{0,63}")
# A resource takes 64 labels; podmanager adds its own two (podmanager-cluster, podmanager-slice).
MAX_USER_LABELS = 62
MAX_SLICES = 1024  # over every slice entry of a spec, not per entry

# A release version as PEP 440 writes it (0.2.0, 1.0rc1, 0.2.0.post1, 0.2.0+local), and a wheel
# of podmanager by PEP 427's file name: NAME-VERSION[-BUILD]-PYTHON-ABI-PLATFORM.whl.
_VERSION = re.compile(r"\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?(\+[a-z0-9]+(\.[a-z0-9]+)*)?", re.IGNORECASE)
_PODMANAGER_WHEEL = re.compile(r"podmanager-(?P<version>[^-/]+)(-\d[^-/]*)?-[^-/]+-[^-/]+-[^-/]+\.whl", re.IGNORECASE)
_GS_FOLDER = re.compile(r"gs://(?P<bucket>[a-z0-9][-_.a-z0-9]{1,220}[a-z0-9])(/[^\s]*)?")
_URL_FOLDER = re.compile(r"[a-z][a-z0-9+.-]*://[^\s]+")


def _no_dot_segments(value: str) -> str:
    """A URL or path whose segments are all names: '..' or '.' would climb out of the folder
    meant (a dry run keeps a bucket as a folder on this machine)."""
    after_scheme = value.split("://", 1)[-1]
    if any(part in (".", "..") for part in after_scheme.split("/")):
        raise ValueError(f"{value!r} has a '.' or '..' segment; write the folder plainly, e.g. gs://my-bucket/checkpoints")
    return value


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Capacity(str, Enum):
    ON_DEMAND = "on-demand"
    SPOT = "spot"
    RESERVED = "reserved"


class Backend(str, Enum):
    GCP = "gcp"
    SIMULATED = "simulated"


class SliceSpec(_Model):
    """One entry of `slices`: `count` slices of one accelerator type, alike."""

    accelerator: str = Field(description="the TPU type, e.g. v4-16 (`podmanager accelerators` lists them)")
    count: int = Field(1, ge=1, le=1024, strict=True,  # strict: `count: true` is a typo, not 1
                       description="how many slices of this shape the runs work on")
    # Hot spares: this many more slices of the same shape, kept READY with their hosts joined and
    # never given to a run, so a run that loses a slice takes one at once (core/spares.py).
    spares: int = Field(0, ge=0, le=1024, strict=True,
                        description="hot spare slices of the same shape beside `count`, kept READY for a swap "
                                    "on a preemption (docs/guide/recovery.md)")
    # The TPU VM software version; left out (or null): the one Google lists for the accelerator's
    # generation (`podmanager accelerators`), filled in below.
    runtime_version: str = Field("", description="the TPU VM image; left out: the generation's default "
                                                  "(tpu-ubuntu2204-base for v4 and older, v2-alpha-tpuv5-lite for "
                                                  "v5e, v2-alpha-tpuv5 for v5p, v2-alpha-tpuv6e for v6e)")
    capacity: Capacity = Field(Capacity.ON_DEMAND, description="on-demand, spot or reserved (a `reservation` "
                                                              "implies reserved)")
    queued: bool = Field(False, description="ask through a queued resource instead of creating the node at once")
    # A reservation's name (or projects/P/locations/Z/reservations/R). The Cloud TPU API takes a
    # name only on a queued resource (a node's scheduling_config has just `reserved`), so it needs
    # `queued: true`; it implies `capacity: reserved`.
    reservation: str | None = Field(None, description="a reservation's name or projects/P/locations/Z/reservations/R; "
                                                       "needs queued: true, implies capacity: reserved")
    # Queued only: how long its queued resource may wait for capacity in one zone (the API keeps
    # it WAITING_FOR_RESOURCES) before it is deleted and the next zone tried. None: the whole of
    # `up`'s timeout in the first zone that takes the request.
    queue_wait_s: float | None = Field(None, ge=0, description="queued only: seconds to wait for capacity in one "
                                                               "zone before trying the next; null: the whole of "
                                                               "`up`'s timeout")
    labels: dict[str, str] = Field(default_factory=dict,
                                   description="labels on every node of these slices (Google Cloud's label rules; "
                                               "the podmanager- prefix is reserved; at most 62)")

    @field_validator("queue_wait_s")
    @classmethod
    def _queue_wait_needs_queued(cls, value: float | None, info: ValidationInfo) -> float | None:
        if value is not None and info.data.get("queued") is False:
            raise ValueError("only a queued resource waits for capacity; add queued: true to this slice "
                             "(or remove queue_wait_s: a node without capacity fails at once and the next zone is tried)")
        return value

    @model_validator(mode="before")
    @classmethod
    def _reservation_means_reserved(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("reservation") and "capacity" not in data:
            return {**data, "capacity": Capacity.RESERVED.value}
        return data

    @field_validator("reservation")
    @classmethod
    def _valid_reservation(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        if not _RESERVATION.fullmatch(value):
            raise ValueError(f"{value!r} is not a reservation name; use its name (e.g. my-reservation) or "
                             "projects/PROJECT/locations/ZONE/reservations/NAME")
        capacity = info.data.get("capacity")
        if capacity is not None and capacity is not Capacity.RESERVED:
            raise ValueError(f"a reservation serves only capacity: reserved, and this slice asks for "
                             f"capacity: {capacity.value}; set capacity: reserved or remove reservation")
        if info.data.get("queued") is False:
            raise ValueError("the Cloud TPU API takes a reservation name only on a queued resource; add "
                             "queued: true to this slice (or remove reservation: capacity: reserved alone uses "
                             "any reservation of the project)")
        return value

    @field_validator("runtime_version", mode="before")
    @classmethod
    def _none_is_the_default(cls, value: Any) -> Any:
        return "" if value is None else value

    @field_validator("runtime_version")
    @classmethod
    def _valid_runtime_version(cls, value: str) -> str:
        if value.strip() and not _RUNTIME_VERSION.fullmatch(value):
            raise ValueError(f"{value!r} is not a TPU software version; use one such as tpu-ubuntu2204-base "
                             "(letters, digits, '-', '_' and '.'), or leave it out for the generation's default")
        return value

    @model_validator(mode="after")
    def _runtime_version_of_the_generation(self) -> "SliceSpec":
        if not self.runtime_version.strip():
            object.__setattr__(self, "runtime_version", catalog.lookup(self.accelerator).runtime_version)
        return self

    @field_validator("accelerator")
    @classmethod
    def _known_accelerator(cls, value: str) -> str:
        try:
            catalog.lookup(value)
        except KeyError as missing:
            raise ValueError(
                f"{value!r} is not a TPU type; {missing.args[0]} see 'podmanager accelerators'"
            ) from None
        return value

    @field_validator("labels")
    @classmethod
    def _valid_labels(cls, labels: dict[str, str]) -> dict[str, str]:
        if len(labels) > MAX_USER_LABELS:
            raise ValueError(f"{len(labels)} labels; a Cloud TPU node takes at most {MAX_USER_LABELS} besides "
                             "podmanager's own two")
        for key, value in labels.items():
            if key.startswith("podmanager-"):
                raise ValueError(f"label {key!r}: the 'podmanager-' prefix is reserved")
            if not _LABEL_KEY.fullmatch(key) or not _LABEL_VALUE.fullmatch(value):
                raise ValueError(
                    f"label {key}={value!r}: keys are 1-63 and values 0-63 lowercase letters, digits, '-' and '_', "
                    "a key starting with a letter (Google Cloud's label rules)"
                )
        return labels


class NetworkSpec(_Model):
    """Where the TPU VMs sit on the network and whom they act as: the Cloud TPU node's
    `network_config`, `service_account` and `tags`, always sent (left out: these defaults);
    every node also carries the cluster's tag (`provisioning.plan.cluster_tag`)."""

    network: str | None = Field(None, description="a VPC by name (my-vpc) or projects/P/global/networks/N; "
                                                  "null: the project's `default` network")
    subnetwork: str | None = Field(None, description="a name or projects/P/regions/R/subnetworks/S (then every "
                                                     "zone must be in R); null: the network's subnetwork in the "
                                                     "zone's region")
    # True, as gcloud, SkyPilot and Google's Ray example do (the API's own default is false): a
    # new project's network has no Cloud NAT and no Private Google Access, without which a VM
    # with no external IP reaches neither the package index nor Google's APIs (`up` checks).
    enable_external_ips: bool = Field(True, description="every worker VM gets an external IP; false needs Cloud "
                                                        "NAT and Private Google Access on the subnetwork (`up` "
                                                        "checks)")
    service_account: str | None = Field(None, description="the email of the account the VMs run as; null: the "
                                                          "project's default compute service account")
    scopes: list[str] = Field(default_factory=lambda: [CLOUD_PLATFORM_SCOPE],
                              description="the account's OAuth scopes, full URLs")
    tags: list[str] = Field(default_factory=list, description="more network tags (lowercase RFC 1035 names) for "
                                                              "firewall rules of your own; pm-<cluster> is always "
                                                              "added")

    @field_validator("network")
    @classmethod
    def _valid_network(cls, value: str | None) -> str | None:
        if value is not None and not _NETWORK.fullmatch(value):
            raise ValueError(f"{value!r} is not a VPC network; use its name (e.g. my-vpc) or "
                             "projects/PROJECT/global/networks/NAME")
        return value

    @field_validator("subnetwork")
    @classmethod
    def _valid_subnetwork(cls, value: str | None) -> str | None:
        if value is not None and not _SUBNETWORK.fullmatch(value):
            raise ValueError(f"{value!r} is not a subnetwork; use its name (e.g. my-subnet) or "
                             "projects/PROJECT/regions/REGION/subnetworks/NAME")
        return value

    @field_validator("service_account")
    @classmethod
    def _valid_service_account(cls, value: str | None) -> str | None:
        if value is not None and not _SERVICE_ACCOUNT.fullmatch(value):
            raise ValueError(f"{value!r} is not a service account's email; use e.g. "
                             "tpu-vms@my-project.iam.gserviceaccount.com, or leave it out for the project's "
                             "default compute service account")
        return value

    @field_validator("scopes")
    @classmethod
    def _valid_scopes(cls, scopes: list[str]) -> list[str]:
        for scope in scopes:
            if not scope.startswith("https://") or any(ch.isspace() for ch in scope):
                raise ValueError(f"{scope!r} is not an OAuth scope URL; use e.g. {CLOUD_PLATFORM_SCOPE}")
        return scopes

    @field_validator("tags")
    @classmethod
    def _valid_tags(cls, tags: list[str]) -> list[str]:
        for tag in tags:
            if not _TAG.fullmatch(tag):
                raise ValueError(f"{tag!r} is not a network tag; tags are 1-63 lowercase letters, digits or '-', "
                                 "starting with a letter and not ending with '-'")
        repeated = sorted({tag for tag in tags if tags.count(tag) > 1})
        if repeated:
            raise ValueError(f"{', '.join(repeated)} listed more than once; list each tag once")
        return tags

    def region(self) -> str | None:
        """The region the subnetwork names, when it is given as a path."""
        match = _SUBNETWORK.fullmatch(self.subnetwork or "")
        return match["region"] if match else None


class HeadSpec(_Model):
    """The Ray head the TPU VM hosts join: started by `up` on this machine unless `address` names one."""

    address: str | None = Field(None, description="connect to this Ray head instead of starting one")
    port: int = Field(0, ge=0, le=65535, description="0 picks a free port")
    dashboard_host: str = Field("127.0.0.1", description="where the Ray dashboard listens")
    join_timeout_s: float = Field(300.0, gt=0, description="seconds `up` waits for every host to join the head")


class ControllerSpec(_Model):
    """Where the cluster's controller runs: the Ray head, every run's supervisor, the state store
    (issue 36). `local: true`: the machine running podmanager is the controller (inside the VPC,
    or tests that need no split); `local: false`: `up` makes a controller VM of the fields below,
    and every verb reaches it over the channel (docs/channel.md)."""

    # Left out: false on Google Cloud (a laptop gets a controller VM: a local controller is refused
    # outside the cluster's network, cluster/controller_place.py), true in a dry run (its simulated
    # VMs reach this machine, which is inside their network: see ClusterSpec._controller_default),
    # but in the namespace mode, where this machine is outside the VPC as a laptop is.
    local: bool = Field(True, strict=True, description="true: the machine running podmanager is the controller (on "
                                                       "Google Cloud only a VM in the cluster's network may be: `up` "
                                                       "refuses it elsewhere); false: `up` makes a controller VM and "
                                                       "every verb reaches it over the channel; left out: false on "
                                                       "Google Cloud and in a dry run's namespace mode, true in "
                                                       "other dry runs")  # strict: `local: "no"` is a typo
    # 4 vCPUs and 16 GB: the controller runs the Ray head (GCS, raylet, dashboard) and one Ray actor
    # process per run's supervisor and service router; a few dozen of them need the memory, and the
    # head must keep answering its hosts while they poll. SkyPilot's jobs controller asks for 4+ CPUs
    # for the same job; e2 is general-purpose, offered in most zones (not us-central2's, a TPU region).
    machine_type: str = Field("e2-standard-4", description="the controller VM's Compute Engine machine type")
    zone: str | None = Field(None, description="the controller VM's zone; null: the nearest to the slices' "
                                                 "that offers machine_type (their region, then their continent's)")
    # The software (Python, Ray, JAX: a few GB), the state store, runs' logs and code packages.
    disk_gb: int = Field(50, ge=10, le=65536, strict=True,
                         description="the controller VM's boot disk")  # 10: a Debian image's smallest disk

    caller: str | None = Field(None, description="the one address (ADDRESS/32) the controller's channel admits; "
                                                "null: this machine's (a dry run: loopback)")

    @field_validator("caller")
    @classmethod
    def _one_address(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            network = ipaddress.ip_network(value, strict=True)
        except ValueError:
            network = None
        if network is None or network.prefixlen != network.max_prefixlen:
            raise ValueError(f"{value!r} is not one address; give ADDRESS/32 (IPv6: /128)")
        return str(network)

    @field_validator("machine_type")
    @classmethod
    def _valid_machine_type(cls, value: str) -> str:
        if not re.fullmatch(_GCE_NAME, value):
            raise ValueError(f"{value!r} is not a Compute Engine machine type; use e.g. e2-standard-4")
        return value

    @field_validator("zone")
    @classmethod
    def _valid_zone(cls, value: str | None) -> str | None:
        if value is not None and not _ZONE.fullmatch(value):
            raise ValueError(f"{value!r} is not a zone name; a zone is lowercase letters, digits and '-', "
                             "starting with a letter, e.g. us-central2-b")
        return value


class HealthSpec(_Model):
    """How a run's supervisor watches it."""

    interval_s: float = Field(1.0, gt=0, le=60, description="seconds between checks of the slices' cloud state and "
                                                            "preemption notices")
    hang_timeout_s: float = Field(600.0, gt=0, description="seconds without a step, counted from the first step "
                                                           "(a long compile is no hang), that make a hang")


class RecoverySpec(_Model):
    """A run's budgets: each kind of failure is paid from its own."""

    max_preemptions: int = Field(100, ge=0, description="preemptions a run survives")
    max_failures: int = Field(2, ge=0, description="program or infrastructure failures a run survives")
    max_hangs: int = Field(3, ge=0, description="hangs a run survives")
    backoff_s: float = Field(1.0, ge=0, description="seconds before a relaunch after a failure, doubled for each "
                                                    "repeat (preemptions do not wait)")
    deadline_s: float | None = Field(None, gt=0, description="seconds from a run's start after which a failure is "
                                                             "no longer recovered; null: no deadline")


# THE switch between a simulated VM that installs its software at boot ("bare": every step a
# real VM runs, from the package index's stand-in) and one that finds the controller's
# environment linked on its disk ("controller": the shortcut). With the stand-in a `bare` boot
# costs 1.4-3.5 s more, but an `up` of two hosts ~7 s and its `down` 6-10 s more (load 8-17,
# benchmarks/RESULTS.md, "The package index stand-in"): over the suite's ~30 clusters that is
# minutes the suite (issue 44) cannot spend yet, so the link stays the default and `bare` is
# what test_vm_boot's install test and `simulation.vm_image: bare` run. Every default of the
# simulated image says this one.
DEFAULT_VM_IMAGE: Literal["controller", "bare"] = "controller"
# The simulated VMs' network mode when a spec leaves `simulation.network` out (the emulator reads it too).
SIM_NETWORK_ENV = "PODMANAGER_SIM_NETWORK"


class SimulationSpec(_Model):
    """Dry runs only: the simulated cloud's latencies, its VMs, and scripted faults."""

    create_latency_s: float = Field(0.5, ge=0, le=A_DAY_S, description="seconds a new node stays CREATING")
    delete_latency_s: float = Field(0.1, ge=0, le=A_DAY_S, description="seconds a node takes to delete")
    # The image's own boot, from READY until the startup script runs (minutes on a real TPU VM;
    # 0 keeps ordinary dry runs short). Benchmarks set it to measure at Google Cloud's latencies.
    boot_delay_s: float = Field(0.0, ge=0, le=A_DAY_S, description="seconds a new VM's image boots before its "
                                                                   "startup script runs")
    # A Compute Engine VM's (the controller's) insert and delete, as Google Cloud takes them
    # (emulator/rulebook.py says where the figures come from); tests that are not about them set less.
    instance_create_latency_s: float = Field(20.0, ge=0, le=A_DAY_S, description="seconds a new Compute Engine VM "
                                                                                   "(the controller) takes to run")
    instance_delete_latency_s: float = Field(30.0, ge=0, le=A_DAY_S, description="seconds a Compute Engine VM "
                                                                                   "takes to delete")
    boot_hosts: bool = Field(True, description="boot each READY slice's hosts as local Ray nodes (about 125 MiB "
                                               "and 1/16 of a core each; refused if this machine cannot hold "
                                               "them); false: control plane only, for large-scale runs")
    # What a simulated VM's disk holds at boot: "controller" (the controller's environment, used
    # by the startup script only if it pins exactly those versions) or "bare" (nothing: the
    # script installs Python, Ray, JAX and podmanager with uv, as on a fresh TPU VM).
    vm_image: Literal["controller", "bare"] = Field(DEFAULT_VM_IMAGE, description="bare: the VMs install "
                                                    "everything at boot, as a fresh TPU VM; controller: they find "
                                                    "this machine's environment linked (a shortcut)")
    # The simulated VMs' network (issue 47; docs/dry-run.md): the mode belongs to the project's
    # emulator, so a running one in another mode is refused rather than changed under its clusters.
    network: Literal["default", "loopback", "namespaces"] = Field(
        "default", description="loopback: every simulated VM on this machine's addresses; namespaces: each in its "
                               "own network namespace behind the project's firewall (Linux as root); default: "
                               "$PODMANAGER_SIM_NETWORK, else loopback")
    faults: list[Fault] = Field(default_factory=list,  # one type for every form of a fault: core/faults.py
                                description="scripted faults, armed at the cluster's first `up` (below)")

    def network_mode(self) -> Literal["default", "loopback", "namespaces"]:
        """`network` as asked: the field, else $PODMANAGER_SIM_NETWORK; "default" when neither
        says (the project's emulator then runs whichever mode it runs, loopback when new)."""
        if self.network != "default":
            return self.network
        asked = os.environ.get(SIM_NETWORK_ENV)
        return asked if asked in ("loopback", "namespaces") else "default"


class PodmanagerSource(str, Enum):
    """Where the TPU VMs get podmanager from, by the form of `boot.podmanager`."""

    BUILT = "built"  # left out: a wheel of the podmanager this controller runs, staged (boot.stage)
    VERSION = "version"  # a release, from the package index the VMs use
    URL = "url"  # a wheel at an http(s):// or gs:// URL the VMs read themselves
    LOCAL_WHEEL = "local-wheel"  # a wheel file on this machine, staged like a built one


def _requirement(value: str) -> str:
    """One entry of boot.packages: a requirement, never an installer option or several lines."""
    text = value.strip()
    if not text:
        raise ValueError("an empty requirement; remove it, or write one such as optax==0.2.4")
    if "\n" in text or "\r" in text:
        raise ValueError(f"{value!r} spans lines; give one requirement per entry")
    if text.startswith("-"):
        # The installer would read it as a flag (-r, --index-url, ...), not as a package.
        raise ValueError(f"{value!r} is an installer option, not a requirement; list requirements only, "
                         "e.g. optax==0.2.4")
    try:
        Requirement(text)
    except InvalidRequirement:
        raise ValueError(f"{value!r} is not a requirement (PEP 508); write one such as optax==0.2.4") from None
    return text


# An Artifact Registry Python repository as pip and uv read it (Google's "Configure
# authentication to Artifact Registry for Python"): the VMs sign in with their own token.
ARTIFACT_REGISTRY_HOST_SUFFIX = "-python.pkg.dev"
_ARTIFACT_REGISTRY_INDEX = re.compile(r"https://[a-z0-9-]+-python\.pkg\.dev/[a-z0-9][-a-z0-9.:]*/[a-z0-9][-a-z0-9]*/simple/?")
_INDEX_URL = re.compile(r"(?P<scheme>ar\+https|https|http)://(?P<host>[^/@:\s]+)(:\d+)?(/[^\s#?]*)?")
_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def on_loopback(index_url: str) -> bool:
    """Whether an index URL names this machine's loopback (a dry run's local index)."""
    found = _INDEX_URL.fullmatch(index_url)
    return found is not None and found["host"].lower() in _LOOPBACK_HOSTS


def _index_url(value: str) -> str:
    """A package index the TPU VMs install from: https://, an Artifact Registry Python
    repository (ar+https:// says so explicitly; the https:// form is kept), or http:// on this
    machine's loopback (a dry run's local index). Never credentials: the spec is stored."""
    text = value.strip()
    ar_example = "https://REGION-python.pkg.dev/PROJECT/REPOSITORY/simple/"
    if "@" in text.split("://", 1)[-1].split("/", 1)[0]:
        raise ValueError(f"{value!r} carries credentials; the spec is stored in podmanager's records, so give the "
                         f"URL alone (an Artifact Registry index, {ar_example}, is read with the VMs' own token)")
    found = _INDEX_URL.fullmatch(text)
    if found is None:
        raise ValueError(f"{value!r} is not a package index URL; give https://HOST/PATH/simple/ (no query or "
                         f"fragment), or an Artifact Registry Python repository {ar_example}")
    host = found["host"].lower()
    if found["scheme"] == "http" and host not in _LOOPBACK_HOSTS:
        raise ValueError(f"{value!r}: the VMs install from an https:// index (http:// only on this machine's "
                         "loopback, for a dry run's local index)")
    if found["scheme"] == "ar+https" or host.endswith(ARTIFACT_REGISTRY_HOST_SUFFIX):
        text = "https://" + text.split("://", 1)[1]
        if not _ARTIFACT_REGISTRY_INDEX.fullmatch(text):
            raise ValueError(f"{value!r} is not an Artifact Registry Python repository's index; write "
                             f"{ar_example} (gcloud artifacts print-settings python prints it)")
        text = text.rstrip("/") + "/"
    return _no_dot_segments(text)


class BootSpec(_Model):
    """What every TPU VM installs at boot, besides the Python, Ray and JAX the controller runs
    (which the VMs always get, pinned: Ray refuses a worker whose versions differ from the head's).

    `podmanager` says which podmanager the VMs install:
    - left out: a wheel of the podmanager running `up`, uploaded to `stage`, so the VMs run
      exactly the controller's code (podmanager is on no package index);
    - a version (0.2.0): `podmanager==0.2.0` from the VMs' package index;
    - an http(s):// or gs:// URL of a podmanager wheel: installed from there;
    - the absolute path of a podmanager wheel on this machine: uploaded to `stage` like a
      built one (a TPU VM cannot read this machine's disk, so no other local path will do).
      Only its form is checked here (a stored spec is read again after the file may be gone);
      whether it exists is checked when it is uploaded.
    """

    podmanager: str | None = Field(None, description="which podmanager the VMs install: left out, a wheel of the "
                                                     "one running `up`; else a version, a wheel's https:// or gs:// "
                                                     "URL, or a wheel's absolute path here")
    packages: list[Annotated[str, AfterValidator(_requirement)]] = Field(
        default_factory=list, description="requirements every host installs at boot (PEP 508); one asking for "
                                          "another Ray or JAX than the controller's is refused")
    # The VMs' package index (their pip and uv, at boot and for a run's -r requirements.txt; the
    # boot lock is resolved against it too). None: PyPI, or what the image's pip is set to.
    index_url: Annotated[str, AfterValidator(_index_url)] | None = Field(
        None, description="the package index the VMs install from (pip's index-url): https://HOST/.../simple/, or an "
                          "Artifact Registry Python repository https://REGION-python.pkg.dev/PROJECT/REPO/simple/ "
                          "(or ar+https://...), read with the VMs' own token; null: PyPI")
    extra_index_urls: list[Annotated[str, AfterValidator(_index_url)]] = Field(
        default_factory=list, description="more indexes the VMs install from beside index_url (pip's "
                                          "extra-index-url; the best version of all is taken), same forms")
    # The Cloud Storage folder `up` uploads the wheel to; None: see controller/staging.py::stage_root.
    stage: str | None = Field(None, description="the gs://BUCKET/PATH the wheel is uploaded to; null: "
                                                "<checkpoints>/podmanager-boot when checkpoints is in Cloud "
                                                "Storage (a dry run: its emulator's bucket)")

    @field_validator("podmanager")
    @classmethod
    def _valid_podmanager(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip()
        if _VERSION.fullmatch(value):
            return value
        wheel_hint = "e.g. gs://my-bucket/wheels/podmanager-0.2.0-py3-none-any.whl"
        if value.startswith("file://"):
            raise ValueError(f"{value!r}: give a wheel on this machine by its absolute path (up uploads it to "
                             "boot.stage for the TPU VMs)")
        if "==" in value:
            raise ValueError(f"{value!r}: write the version alone, e.g. 0.2.0")
        if is_url(value):
            scheme, rest = value.split("://", 1)
            if scheme not in ("http", "https", "gs"):
                raise ValueError(f"{value!r}: a TPU VM installs podmanager from an https://, http:// or gs:// URL "
                                 f"of a wheel; {wheel_hint}")
            if "/" not in rest.strip("/"):
                raise ValueError(f"{value!r} names no wheel file; give the URL of a podmanager wheel, {wheel_hint}")
        elif not os.path.isabs(value):
            raise ValueError(f"{value!r} is neither a version (e.g. 0.2.0), a wheel's URL nor the absolute path of "
                             "a wheel file on this machine (which up uploads to boot.stage for the TPU VMs)")
        if not _PODMANAGER_WHEEL.fullmatch(value.rsplit("/", 1)[-1]):
            raise ValueError(f"{value!r} is no podmanager wheel (podmanager-VERSION-py3-none-any.whl); a TPU VM "
                             "cannot read this machine's disk or install from a source tree: give a built wheel, "
                             "a version on your package index, or leave boot.podmanager out to ship the podmanager "
                             "running here")
        return value

    @field_validator("stage")
    @classmethod
    def _valid_stage(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not _GS_FOLDER.fullmatch(value):
            raise ValueError(f"{value!r} is not a Cloud Storage folder; use gs://BUCKET/PATH (up uploads "
                             "podmanager's wheel there for the TPU VMs to read)")
        return _no_dot_segments(value.rstrip("/"))

    @property
    def source(self) -> PodmanagerSource:
        if self.podmanager is None:
            return PodmanagerSource.BUILT
        if _VERSION.fullmatch(self.podmanager):
            return PodmanagerSource.VERSION
        return PodmanagerSource.URL if is_url(self.podmanager) else PodmanagerSource.LOCAL_WHEEL

    def podmanager_version(self) -> str | None:
        """The podmanager version the VMs get, as the spec says it (a wheel's, from its file
        name); None for a wheel built when `up` runs."""
        if self.podmanager is None or self.source is PodmanagerSource.VERSION:
            return self.podmanager
        found = _PODMANAGER_WHEEL.fullmatch(self.podmanager.rsplit("/", 1)[-1])
        assert found is not None  # the validator saw to it
        return found["version"]


class ClusterSpec(_Model):
    """A cluster: its name, where it lives, its slices, and how its runs are watched and recovered."""

    name: str = Field(description="1-30 lowercase letters, digits or '-', a letter first; nodes are named "
                                  "<name>-s<index>")
    backend: Backend = Field(Backend.GCP, description="gcp, or simulated (what --dry-run sets)")
    project: str | None = Field(None, description="the Google Cloud project id; null: GOOGLE_CLOUD_PROJECT, then "
                                                  "CLOUDSDK_CORE_PROJECT (a dry run: podmanager-sim)")
    zones: list[str] | None = Field(None, description="zones tried in order when one has no capacity; null: "
                                                      "required on Google Cloud, the simulated zones on a dry run")
    slices: list[SliceSpec] = Field(min_length=1, description="the slices, at most 1,024 over all entries")
    head: HeadSpec = Field(default_factory=HeadSpec, description="the Ray head")
    health: HealthSpec = Field(default_factory=HealthSpec, description="a run's health checks")
    recovery: RecoverySpec = Field(default_factory=RecoverySpec, description="a run's recovery budgets")
    simulation: SimulationSpec = Field(default_factory=SimulationSpec, description="dry runs only")
    network: NetworkSpec | None = Field(None, description="Google Cloud networking and the VMs' account; null: "
                                                          "the section's defaults")
    boot: BootSpec = Field(default_factory=BootSpec, description="what every TPU VM installs at boot")
    controller: ControllerSpec = Field(default_factory=ControllerSpec, description="where the Ray head, the "
                                       "supervisors and the state store run")
    # Kept by `up`, not written by hand: when fewer spares leave a run's slice past its group's
    # last index (it took a spare's place), `up` drops an idle slice of the group instead, and
    # numbering passes over its index from then on (provisioning/slice_layout.py).
    retired_slices: list[Annotated[int, Field(ge=0)]] = Field(
        default_factory=list, description="slice indexes the cluster no longer uses, passed over in numbering (kept "
                                          "by up when it drops an idle slice in place of a run's; leave it out)")
    checkpoints: str | None = Field(None, description="gs://bucket/prefix (or an absolute path) every run "
                                                      "checkpoints under, in <prefix>/<cluster>/<program>, unless "
                                                      "it passes --checkpoint-dir")

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        if not NAME_PATTERN.fullmatch(value):
            raise ValueError(
                f"{value!r} must be 1-30 lowercase letters, digits or '-', starting with a letter"
            )
        return value

    @field_validator("checkpoints")
    @classmethod
    def _valid_checkpoints(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if is_url(value):
            if not value.split("://", 1)[1].strip("/"):
                raise ValueError(f"{value!r} names no bucket; use e.g. gs://my-bucket/checkpoints")
            if not _URL_FOLDER.fullmatch(value):
                raise ValueError(f"{value!r} is not a URL of a folder (it holds spaces or control characters); "
                                 "use e.g. gs://my-bucket/checkpoints")
            return _no_dot_segments(value.rstrip("/"))
        if not os.path.isabs(value):
            # A relative folder would depend on where each command happens to run.
            raise ValueError(f"{value!r} is neither a URL nor an absolute path; use a bucket every host "
                             "shares, e.g. gs://my-bucket/checkpoints (or, for a dry run, an absolute folder)")
        return os.path.normpath(value)

    @model_validator(mode="after")
    def _controller_default(self) -> "ClusterSpec":
        """`controller.local` left out: on Google Cloud a controller VM, as a laptop needs one (a
        local controller is accepted only on a VM in the cluster's network, where it is asked for by
        name); in a dry run this machine, whose simulated VMs all reach it (docs/dry-run.md), except
        in the namespace mode, where this machine stands outside the VPC as a laptop does."""
        outside = self.backend is Backend.GCP or self.simulation.network_mode() == "namespaces"
        if outside and "local" not in self.controller.model_fields_set:
            return self.model_copy(update={"controller": self.controller.model_copy(update={"local": False})})
        return self

    @model_validator(mode="after")
    def _fill_project_and_zones(self) -> "ClusterSpec":
        if self.zones == []:
            raise ValueError("zones: the list is empty; list at least one zone, e.g. [us-central2-b]"
                             + (", or leave zones out for the simulated ones" if self.backend is Backend.SIMULATED
                                else ""))
        if self.backend is Backend.SIMULATED:
            project = self.project or SIMULATED_PROJECT
            zones = self.zones or SIMULATED_ZONES
        else:
            project = self.project or os.environ.get("GOOGLE_CLOUD_PROJECT") or os.environ.get("CLOUDSDK_CORE_PROJECT")
            if not project:
                raise ValueError(
                    "project: no GCP project given; set 'project:' in the spec or GOOGLE_CLOUD_PROJECT, "
                    "or use --dry-run"
                )
            zones = self.zones
            if not zones:
                raise ValueError("zones: list at least one zone, e.g. [us-central2-b]")
        if not _PROJECT_ID.fullmatch(project):
            raise ValueError(f"project: {project!r} is not a Google Cloud project id; an id is 6-30 lowercase "
                             "letters, digits or '-', starting with a letter and not ending with '-' "
                             "(e.g. my-project-123)")
        for at, zone in enumerate(zones):
            if not _ZONE.fullmatch(zone):
                raise ValueError(f"zones[{at}]: {zone!r} is not a zone name; a zone is lowercase letters, digits "
                                 "and '-', starting with a letter, e.g. us-central2-b")
        if len(set(zones)) != len(zones):
            raise ValueError(f"zones: {zones} lists a zone twice")
        subnetwork = self.network.subnetwork if self.network else None
        region = self.network.region() if self.network else None
        elsewhere = [zone for zone in zones if region and zone.rsplit("-", 1)[0] != region]
        if elsewhere and self.backend is Backend.GCP:  # simulated zones are in no region
            raise ValueError(f"network.subnetwork: {subnetwork} is in region {region}, but zone(s) "
                             f"{', '.join(elsewhere)} are not; a TPU VM takes a subnetwork of its own zone's "
                             "region: list only zones of that region, or give the subnetwork by name")
        controller_zone = self.controller.zone
        if region and controller_zone and controller_zone.rsplit("-", 1)[0] != region and self.backend is Backend.GCP:
            raise ValueError(f"controller.zone: {controller_zone} is not in region {region} of network.subnetwork "
                             f"{subnetwork}; the controller joins the slices' subnetwork: name a zone of {region}")
        object.__setattr__(self, "project", project)
        object.__setattr__(self, "zones", list(zones))
        return self

    @model_validator(mode="after")
    def _slices_in_bounds(self) -> "ClusterSpec":
        total = sum(group.count for group in self.slices)
        if total > MAX_SLICES:
            raise ValueError(f"slices: {total} slices over all entries; a cluster has at most {MAX_SLICES} "
                             "(split it into clusters of its own)")
        hosts = [catalog.lookup(group.accelerator).hosts for group in self.slices for _ in range(group.count)]
        for at, fault in enumerate(self.simulation.faults):
            where = f"simulation.faults[{at}] ({fault.text()})"
            index = getattr(fault, "slice", None)
            if index is not None and index >= total:
                raise ValueError(f"{where}: there is no slice {index}; this cluster's slices are 0 to {total - 1}")
            worker = getattr(fault, "worker", None)
            if index is not None and worker is not None and worker >= hosts[index]:
                raise ValueError(f"{where}: slice {index} has no host {worker}; its hosts are 0 to {hosts[index] - 1}")
        return self

    @property
    def simulated(self) -> bool:
        return self.backend is Backend.SIMULATED

    def slice_list(self) -> list["SliceInstance"]:
        """The slices one by one, `count` and `spares` expanded, with their stable index (which
        of them are spares at the moment is recorded apart: core/spares.py), numbered in order
        past `retired_slices`."""
        out: list[SliceInstance] = []
        retired, index = set(self.retired_slices), 0
        for group in self.slices:
            for _ in range(group.count + group.spares):
                while index in retired:
                    index += 1
                out.append(SliceInstance(index=index, spec=group, accelerator=catalog.lookup(group.accelerator)))
                index += 1
        return out


class SliceInstance(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    index: int
    spec: SliceSpec
    accelerator: catalog.Accelerator


def _field_path(location: tuple[Any, ...]) -> str:
    path = ""
    for part in location:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part.startswith("function-") or part in ("literal['simulated']",):
            continue
        else:
            path += f".{part}" if path else str(part)
    return path


def _fields_at(location: tuple[Any, ...]) -> list[str]:
    """The field names of the model at `location` in a ClusterSpec (list indexes and
    union tags in it are passed over)."""
    model: type[BaseModel] = ClusterSpec
    for part in location:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        if field is None:
            continue
        inner = model_in(field.annotation)
        if inner is None:
            return []
        model = inner
    return list(model.model_fields)


def model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation such as `list[SliceSpec]` or `HeadSpec | None`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in typing.get_args(annotation):
        found = model_in(argument)
        if found is not None:
            return found
    return None


def _describe(error: dict[str, Any]) -> str:
    if error["loc"][:2] == ("simulation", "faults") and len(error["loc"]) > 2:  # inside one fault
        field, message = explain({**error, "loc": error["loc"][3:]})  # type: ignore[typeddict-item]
        return f"{_field_path(error['loc'][:3])}{'.' + field if field else ''}: {message}"
    path = _field_path(error["loc"])
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        close = difflib.get_close_matches(str(error["loc"][-1]), _fields_at(error["loc"][:-1]), n=1, cutoff=0.6)
        message = (f"unknown field; did you mean {close[0]}?" if close
                   else "unknown field; check the spelling (see infra/examples/ for every field)")
    elif error["type"] == "missing":
        message = "required field is missing"
    return f"{path}: {message}" if path else message


def parse_spec(data: Any, *, source: str = "spec", dry_run: bool = False) -> ClusterSpec:
    """Validate a mapping as a ClusterSpec; `dry_run` forces the simulated backend."""
    if not isinstance(data, dict):
        raise SpecError(f"{source}: expected a mapping of fields, got {type(data).__name__}")
    if dry_run:
        data = {**data, "backend": Backend.SIMULATED.value}
    try:
        return ClusterSpec.model_validate(data)
    except ValidationError as invalid:
        lines = [_describe(e) for e in invalid.errors()]
        raise SpecError(f"{source} is invalid:\n  " + "\n  ".join(lines)) from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (PyYAML keeps the last
    silently: `count: 2` above a forgotten `count: 1` would make one slice)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            try:
                repeated = key in seen
            except TypeError:  # an unhashable key (a list): the base class says so
                break
            if repeated:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice in one mapping; keep one", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_spec(path: str | Path, *, dry_run: bool = False) -> ClusterSpec:
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as missing:
        raise SpecError(f"--file: cannot read {path}: {missing.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as binary:
        raise SpecError(f"--file: {path} is not a text file (byte {binary.start} is not UTF-8); "
                        "give the cluster's YAML spec, e.g. infra/examples/v4-16.yaml") from None
    named = io.StringIO(text)
    named.name = str(path)  # YAML's error marks name the file, not "<unicode string>"
    try:
        data = yaml.load(named, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
        return parse_spec(data, source=str(path), dry_run=dry_run)
    except yaml.YAMLError as bad:
        raise SpecError(f"{path}: not valid YAML: {bad}") from None
    except RecursionError:
        raise SpecError(f"{path}: nested too deeply to be a cluster spec; see infra/examples/ for its shape") from None

