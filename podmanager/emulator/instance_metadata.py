"""The metadata server of a simulated Compute Engine instance (the dry run's controller VM), as
GCE's answers an instance: its metadata (`instance/attributes/KEY`, the startup script), name,
zone, hostname, id, network addresses, the project, its service account's email and token, and
its guest attributes (GET and PUT), read from the simulated cloud as it is now. Served by
`metadata.MetadataServers` like a TPU VM's, to the owner's processes only."""

from __future__ import annotations

import hashlib

from podmanager.cloud import errors as cloud_errors
from podmanager.cloud.instances import Instance
from podmanager.emulator import rulebook
from podmanager.emulator.metadata import (
    ATTRIBUTES,
    GUEST_ATTRIBUTES,
    access_token,
    default_service_account,
)
from podmanager.emulator.sim.cloud import SIMULATED_PROJECT_NUMBER, SimCloud
from podmanager.emulator.sim.instances import SimInstances

NETWORK_INTERFACE = "instance/network-interfaces/0/"


class InstanceFacts:
    """What one instance's metadata server serves (`metadata.MetadataFacts`)."""

    def __init__(self, *, sim: SimCloud, zone: str, name: str):
        self.sim = sim
        self.zone, self.name = zone, name

    def _instance(self) -> Instance | None:
        try:
            with self.sim.compute() as project:
                return SimInstances(project).instance(self.zone, self.name)
        except cloud_errors.NotFoundError:
            return None

    def value(self, path: str) -> str | None:
        """The value at `path` (below computeMetadata/v1/), or None for a 404."""
        instance = self._instance()
        if instance is None:
            return None
        path = path.strip("/")
        email = default_service_account() if instance.service_account in ("", "default") else instance.service_account
        fixed = {
            "project/project-id": self.sim.project,
            "project/numeric-project-id": SIMULATED_PROJECT_NUMBER,
            "instance/name": instance.name,
            "instance/id": str(int(hashlib.sha1(f"{self.zone}/{self.name}".encode()).hexdigest()[:15], 16)),
            "instance/zone": f"projects/{SIMULATED_PROJECT_NUMBER}/zones/{self.zone}",
            "instance/hostname": f"{instance.name}.{self.zone}.c.{self.sim.project}.internal",
            "instance/machine-type": f"projects/{SIMULATED_PROJECT_NUMBER}/machineTypes/{instance.machine_type}",
            f"{NETWORK_INTERFACE}ip": instance.internal_ip,
            # As GCE writes it: the project's number, then the network's name
            # (https://cloud.google.com/compute/docs/metadata/predefined-metadata-keys).
            f"{NETWORK_INTERFACE}network": f"projects/{SIMULATED_PROJECT_NUMBER}/networks/"
                                           f"{instance.network.rsplit('/', 1)[-1]}",
            "instance/service-accounts/default/email": email,
            "instance/service-accounts/default/token": access_token(email),
        }
        if instance.external_address:
            fixed[f"{NETWORK_INTERFACE}access-configs/0/external-ip"] = instance.external_address
        if path in fixed:
            return fixed[path]
        if path.startswith(GUEST_ATTRIBUTES):
            return self._guest_attribute(path[len(GUEST_ATTRIBUTES):])
        if path.startswith(ATTRIBUTES):
            return instance.metadata.get(path[len(ATTRIBUTES):])
        return None

    def _guest_attribute(self, path: str) -> str | None:
        """One key's value (`NAMESPACE/KEY`); None for a namespace or a key not written."""
        if "/" not in path:
            return None
        try:
            with self.sim.compute() as project:
                found = SimInstances(project).guest_attributes(self.zone, self.name, path)
        except cloud_errors.NotFoundError:
            return None
        return found[0][2] if len(found) == 1 else None

    def put_guest_attribute(self, path: str, value: str) -> None:
        """`PUT instance/guest-attributes/NAMESPACE/KEY` (`path`); CloudError for a bad path."""
        with self.sim.compute() as project:
            SimInstances(project).set_guest_attribute(self.zone, self.name, path, value)

    def guest_attributes_enabled(self) -> bool:
        """The instance's metadata turns them on (the simulated project has no project-wide metadata)."""
        instance = self._instance()
        return rulebook.guest_attributes_enabled(instance.metadata if instance else {}, {})
