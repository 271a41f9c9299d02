"""The cluster's controller VM as the user's machine makes and removes it (`controller.local:
false`): what `up` does before it hands the spec to the controller, and what `down` does after.

`plan`: create the VM, keep the one there, or change it in place, its boot disk kept
(`controller_plan.py`: what cannot be changed in place is refused, exit 2, before anything
changes, as is software that cannot be resolved; the runs going on are asked of the controller
and named). `bring_up`, after it:
1. the channel's token: this machine's for the cluster if it has one, else a new one, kept in
   Secret Manager (`channel_secret_id`) and granted to the VMs' account, and the Ray token
   likewise (`make_secrets`: by the user, never by a VM's account, which may not grant);
2. the software every VM of the cluster installs (`controller/staging.py`: the wheel staged, the
   lock resolved) and the startup script with the controller role;
3. the VM and its channel rule (`cloud/gcp/controller_vm.py`), admitting this machine only; or
   the VM there changed in place: its startup script replaced (the new software staged as for a
   new VM), its disk grown, its machine type set, and booted again on its disk (a reset, or a
   stop and a start): the daemon starts again on the state it left, and its supervisors pick the
   runs up as after a controller crash;
4. its boot followed through its guest attributes (`podmanager/boot`: installing, token,
   starting, serving, or error with its detail) until it serves the channel (after new
   software, once it reports the versions it installed);
5. its certificate (`podmanager/channel-cert`) pinned, with its address and the token, in this
   machine's pointer to the cluster (`client/pinned.py`).
Every step finds what an interrupted `up` left and finishes it.

`tear_down`: the VM, its rule and both secrets deleted, and the pointer removed."""

from __future__ import annotations

import secrets
import shutil
from typing import Callable

from podmanager.client import pinned
from podmanager.client.channel_callers import controller_spec
from podmanager.client.controller_plan import (
    CREATE,
    ControllerPlan,
    drift,
    plan_controller,
)
from podmanager.cloud.gcp.cluster_accounts import grant_channel_token, grant_ray_token
from podmanager.cloud.gcp.controller_vm import (
    ControllerVmDeleted,
    change_controller_vm,
    choose_zone,
    controller_vm_name,
    create_controller_vm,
    delete_controller_vm,
    find_controller_vm,
)
from podmanager.cloud.gcp.instances import ComputeInstances
from podmanager.cloud.gcp.secrets import (
    TokenSecrets,
    channel_secret_id,
    token_secret_id,
)
from podmanager.cloud.instances import LEAVING_STATES
from podmanager.cluster import backends
from podmanager.cluster.teardown import stop_idle_emulator
from podmanager.controller.staging import resolve_software, wanted_versions
from podmanager.controller.startup import CONTROLLER_ROLE, render_startup_script
from podmanager.core.cadence import Cadence
from podmanager.core.clock import poll_until
from podmanager.core.errors import PodmanagerError, TimeoutExceededError
from podmanager.core.events import EventKind
from podmanager.core.local_ports import LOOPBACK_IP, free_port
from podmanager.core.machine_folders import remove_vms_folder
from podmanager.core.records import Versions
from podmanager.core.run_results import ACTIVE
from podmanager.core.spec import ClusterSpec

CHANNEL_PORT = 8443  # on Google Cloud; a dry run's controller takes a free loopback port
CERT_KEY, ADDRESS_KEY, STAGE_KEY, DETAIL_KEY = "channel-cert", "channel-address", "boot", "boot-detail"
VERSIONS_KEY = "versions"  # what the VM's software reports after its install (the startup script)
SERVING, ERROR = "serving", "error"
Say = Callable[[EventKind, str], None]


def caller_address(spec: ClusterSpec) -> str:
    """The one address the channel's rule admits: this machine's as the controller sees it. A
    dry run's controller is on this machine's loopback, or, in the emulator's namespace mode,
    behind the simulated internet, where this machine is its home router's address, which the
    emulator's record tells (docs/channel.md says why); on Google Cloud the address the internet
    sees this machine by, which the user gives (`controller.caller`): podmanager asks no outside
    service for it."""
    if spec.simulated:
        return f"{backends.simulated_laptop_address(spec) or LOOPBACK_IP}/32"
    if spec.controller.caller:
        return spec.controller.caller
    raise PodmanagerError("controller.caller: podmanager needs this machine's public address for the controller's "
                          "firewall rule", hint="Set controller.caller: ADDRESS/32 (e.g. from "
                                                "'curl -s https://checkip.amazonaws.com').")


def on_loopback(spec: ClusterSpec) -> bool:
    """A dry run in the loopback mode: its controller VM shares this machine's ports (a free one is
    taken); in the namespace mode the VM has its own, as on Google Cloud."""
    return spec.simulated and backends.simulated_laptop_address(spec) is None


def make_secrets(spec: ClusterSpec, *, channel_token: str) -> None:
    """Both secrets the cluster's VMs read at boot, made and granted to their account from this
    machine, by its user: the channel's token and the Ray token (kept if it is there: a second
    `up`). Never by a VM's own account: granting needs secretmanager.secrets.setIamPolicy and
    checking the latest version secretmanager.versions.access, which even Editor lacks
    (https://docs.cloud.google.com/iam/docs/roles-permissions/secretmanager)."""
    host = backends.secrets_host(spec)
    with TokenSecrets(spec.project or "", emulator_host=host, secret_id=channel_secret_id) as channel:
        channel.ensure(spec.name, channel_token)
        grant_channel_token(channel, spec)  # the controller VM's account (the cluster's own, or the spec's)
    with TokenSecrets(spec.project or "", emulator_host=host) as ray_token:
        ray_token.ensure(spec.name, ray_token.read(spec.name) or secrets.token_hex(32))
        grant_ray_token(ray_token, spec)


class ControllerMachine:
    def __init__(self, spec: ClusterSpec, say: Say):
        self.spec = spec
        self.say = say

    def plan(self) -> ControllerPlan:
        """What `bring_up` will do to the controller VM, said; SpecError (exit 2) if the one there
        differs from what it would make now, or if the VMs' software cannot be resolved (a typo
        in `boot.packages`). Changes nothing."""
        spec = self.spec
        resolve_software(spec, stage=False)  # the lock is kept: bring_up's resolve reuses it
        with backends.make_instances(spec) as instances:
            existing = find_controller_vm(spec, instances)
            if existing is not None and existing.status in LEAVING_STATES:  # being deleted: made anew
                existing = None
            reported = instances.guest_attributes(existing.zone, existing.name).get(VERSIONS_KEY, "") if existing else ""
            zone = existing.zone if existing else choose_zone(spec, instances)  # a bad zone or type: refused here
        running, wanted = Versions.parse(reported), wanted_versions(spec)
        going_on = self._going_on() if existing is not None and drift(spec, existing, running, wanted) else ()
        plan = plan_controller(spec, controller_vm_name(spec.name), existing, running, wanted, zone, going_on)
        self.say(EventKind.CONTROLLER_PLAN, f"plan for the controller: {plan.describe()}")
        return plan

    def _going_on(self) -> tuple[str, ...] | None:
        """The runs going on on the controller, asked over the channel; None when it does not
        answer (stopped, or no pointer to it on this machine) or answers what this podmanager
        cannot read."""
        from podmanager.client.channel_client import ChannelClient

        try:
            with ChannelClient(pinned.load(self.spec.name)) as client:
                runs = client.runs(self.spec.name).runs
        except PodmanagerError:
            return None
        return tuple(f"{run.run_id} ({run.status})" for run in runs if run.status in ACTIVE)

    def bring_up(self, *, timeout_s: float, plan: ControllerPlan | None = None) -> pinned.ClientCredentials:
        spec = self.spec
        plan = plan or self.plan()
        token = self._token()
        pinned.save_token(spec.name, token)
        make_secrets(spec, channel_token=token)
        software = resolve_software(spec)
        port = pinned.load_address(spec.name).port if pinned.has_address(spec.name) else (
            free_port(LOOPBACK_IP) if on_loopback(spec) else CHANNEL_PORT)
        script = render_startup_script(spec.name, software, channel_secret_id(spec.name), role=CONTROLLER_ROLE,
                                       channel_port=port)
        if plan.kind == CREATE:
            self.say(EventKind.CONTROLLER_CREATING, f"creating the controller VM {plan.vm} ({plan.machine_type}), "
                                                    f"reachable from {caller_address(spec)} only")
        elif plan.in_place:
            self.say(EventKind.CONTROLLER_CHANGING, f"changing the controller VM {plan.vm} in place: {plan.steps()}")
        with backends.make_instances(spec) as instances, backends.make_networks(spec) as networks:
            if plan.in_place:
                vm = change_controller_vm(spec, instances=instances, networks=networks, caller=caller_address(spec),
                                          port=port, startup_script=script, machine_type=plan.new_machine_type,
                                          disk_gb=plan.new_disk_gb, timeout_s=timeout_s)
            else:
                vm = create_controller_vm(spec, instances=instances, networks=networks, caller=caller_address(spec),
                                          port=port, startup_script=script, timeout_s=timeout_s)
            # New software: its boot is seen through (and the last boot's `serving` not taken for it)
            # once the VM reports the versions it installed.
            attributes = self._wait_serving(instances, vm.zone, timeout_s,
                                            versions=wanted_versions(spec) if plan.new_software else None)
        host, _, served_port = attributes[ADDRESS_KEY].rpartition(":")  # as the controller's certificate names it
        credentials = pinned.install(spec.name, pinned.ControllerAddress(host=host, port=int(served_port)),
                                     attributes[CERT_KEY], token)
        self.say(EventKind.CONTROLLER_READY, f"the controller VM {vm.name} serves the channel at "
                                             f"{host}:{served_port}")
        return credentials

    def _token(self) -> str:
        """This machine's token for the cluster (an interrupted `up` made it), else a new one."""
        try:
            return pinned.load_token(self.spec.name)
        except PodmanagerError:
            return secrets.token_urlsafe(32)

    def _wait_serving(self, instances: ComputeInstances, zone: str, timeout_s: float,
                      versions: Versions | None = None) -> dict[str, str]:
        """The VM's guest attributes once it reports `serving` (and, given `versions`, that it
        runs them: a VM booted again still shows its last boot's `serving` until it writes anew)."""
        said = [""]
        name = controller_vm_name(self.spec.name)

        def serving() -> dict[str, str] | None:
            attributes = instances.guest_attributes(zone, name)
            stage = attributes.get(STAGE_KEY, "")
            if stage != said[0] and stage:
                said[0] = stage
                self.say(EventKind.CONTROLLER_BOOT, f"controller VM: {stage}")
            if stage == ERROR:
                raise PodmanagerError(f"the controller VM's boot failed: {attributes.get(DETAIL_KEY, '')}",
                                      hint=f"Its serial console has the whole log; 'podmanager down -c "
                                           f"{self.spec.name}' deletes it.")
            reported = Versions.parse(attributes.get(VERSIONS_KEY, ""))
            if versions is not None and (reported is None or versions.differences(reported)):
                return None
            return attributes if stage == SERVING and attributes.get(CERT_KEY) and attributes.get(ADDRESS_KEY) else None

        return poll_until(serving, timeout_s=timeout_s, interval_s=Cadence.for_spec(self.spec).boot_poll_s,
                          on_timeout=lambda: TimeoutExceededError(
                              f"the controller VM did not serve the channel within {timeout_s:.0f}s "
                              f"(its boot: {said[0] or 'not started'})",
                              hint=f"'podmanager up' again finishes it; 'podmanager down -c {self.spec.name}' deletes it."))

    def tear_down(self, *, timeout_s: float = 300.0) -> ControllerVmDeleted:
        spec = self.spec
        with backends.make_instances(spec) as instances, backends.make_networks(spec) as networks:
            deleted = delete_controller_vm(spec, instances=instances, networks=networks, timeout_s=timeout_s)
        for secret_id in (channel_secret_id, token_secret_id):  # both made from here, both deleted from here
            with TokenSecrets(spec.project or "", emulator_host=backends.secrets_host(spec),
                              secret_id=secret_id) as secrets_api:
                secrets_api.delete(spec.name)
        shutil.rmtree(pinned.folder(spec.name), ignore_errors=True)
        if spec.simulated:  # the folder of the cluster's simulated VMs, empty once its controller VM went
            remove_vms_folder(spec.name)
        if deleted.instance:
            self.say(EventKind.CONTROLLER_DELETED, f"deleted the controller VM {deleted.instance} and its rule "
                                                   f"{deleted.rule}")
        stop_idle_emulator(spec, lambda kind, message, **data: self.say(kind, message))
        return deleted


def cloud_credentials(spec: ClusterSpec) -> pinned.ClientCredentials:
    """The channel's credentials as the cloud holds them, kept nowhere yet: the controller VM
    found by its labels, its certificate and address read from its guest attributes, the token
    from Secret Manager (with this user's credentials)."""
    from podmanager.core.errors import ClusterNotFoundError

    name = spec.name
    with backends.make_instances(spec) as instances:
        vm = find_controller_vm(spec, instances)
        if vm is None:
            if spec.simulated:
                backends.stop_emulator_if_idle(spec.project or "")  # started only to look: an empty project's goes
            raise ClusterNotFoundError(f"--cluster {name}: project {spec.project} has no controller VM of that name",
                                       hint="Check the name and --project; 'podmanager up -f SPEC' creates it.")
        attributes = instances.guest_attributes(vm.zone, vm.name)
    if attributes.get(STAGE_KEY) != SERVING or not attributes.get(CERT_KEY) or not attributes.get(ADDRESS_KEY):
        raise PodmanagerError(f"the controller VM of {name} is not serving yet (its boot: "
                              f"{attributes.get(STAGE_KEY) or 'not started'})",
                              hint="Try again in a minute, or run 'podmanager up' from the machine with its spec.")
    with TokenSecrets(spec.project or "", emulator_host=backends.secrets_host(spec),
                      secret_id=channel_secret_id) as secrets_api:
        token = secrets_api.read(name)
    if not token:
        raise PodmanagerError(f"Secret Manager holds no channel token of {name} ({channel_secret_id(name)})",
                              hint="'podmanager up -f SPEC' makes it again.")
    host, _, port = attributes[ADDRESS_KEY].rpartition(":")
    return pinned.ClientCredentials(name, pinned.ControllerAddress(host=host, port=int(port)), attributes[CERT_KEY],
                                    token.strip(), pinned.folder(name))


def connect(name: str, *, project: str | None, dry_run: bool) -> pinned.ClientCredentials:
    """This machine's pointer to a cluster made from another (or whose pointer was lost): the
    channel's credentials read from the cloud (`cloud_credentials`) and kept, and the spec from
    the controller itself. Nothing of the cluster changes."""
    from podmanager.client.channel_client import ChannelClient

    found = cloud_credentials(controller_spec(name, project=project, dry_run=dry_run))
    credentials = pinned.install(name, found.address, found.cert_pem, found.token)
    with ChannelClient(credentials) as client:
        pinned.save_spec(name, client.spec(name).spec_json)
    return credentials
