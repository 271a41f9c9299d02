"""Which address a simulated VM's Ray node takes (vm/node_address.py): loopback on the laptop and
in the loopback mode, the VM's internal address from its metadata server in the namespace mode."""

from __future__ import annotations

import pytest

from podmanager.core.errors import PodmanagerError
from podmanager.vm import boot_status, node_address, procs


@pytest.fixture
def metadata(monkeypatch):
    asked: list[str] = []
    answers = {node_address.INTERNAL_IP: "10.128.0.7"}

    def read(path, **_):
        asked.append(path)
        return answers.get(path)

    monkeypatch.setattr(boot_status, "read_metadata", read)
    return asked, answers


def test_the_laptop_and_a_loopback_mode_vm_take_loopback_without_asking(monkeypatch, metadata, tmp_path):
    asked, _ = metadata
    monkeypatch.delenv(procs.ROOT_ENV, raising=False)
    assert node_address.simulated_node_address() == "127.0.0.1"
    monkeypatch.setenv(procs.ROOT_ENV, str(tmp_path))
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:4242")  # a loopback-mode VM's own metadata server
    assert node_address.simulated_node_address() == "127.0.0.1"
    assert asked == []


def test_a_vm_in_its_own_namespace_takes_its_internal_address(monkeypatch, metadata, tmp_path):
    monkeypatch.setenv(procs.ROOT_ENV, str(tmp_path))
    monkeypatch.delenv("GCE_METADATA_IP", raising=False)
    assert node_address.simulated_node_address() == "10.128.0.7"


def test_no_internal_address_in_the_metadata_is_an_error_not_loopback(monkeypatch, metadata, tmp_path):
    _, answers = metadata
    answers.clear()
    monkeypatch.setenv(procs.ROOT_ENV, str(tmp_path))
    monkeypatch.delenv("GCE_METADATA_IP", raising=False)
    with pytest.raises(PodmanagerError, match="network-interfaces/0/ip"):
        node_address.simulated_node_address()
