"""A dry run boots no more simulated hosts than this machine holds (issue 34, item 7): more is
refused before anything is created, saying how many it holds and how to simulate without hosts."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from podmanager.cli import app
from podmanager.core.errors import SpecError
from podmanager.core.spec import parse_spec
from podmanager.emulator import vm_room as room
from podmanager.state import StateStore

GIB = 1024 ** 3


def spec(*slices: tuple[str, int], boot_hosts: bool = True):
    return parse_spec({"name": "big", "slices": [{"accelerator": a, "count": n} for a, n in slices],
                       "simulation": {"boot_hosts": boot_hosts}}, dry_run=True)


def test_the_room_is_the_smaller_of_memory_and_cores():
    assert room.hosts_it_holds(24 * GIB, 2) == 2 * room.HOSTS_PER_CORE  # cores bound a 2-core machine
    assert room.hosts_it_holds(4 * GIB, 64) == int((4 * GIB * room.MEMORY_SHARE - room.SHARED_MEMORY)
                                                   // room.HOST_MEMORY)
    assert room.hosts_it_holds(512 * 1024 ** 2, 8) == 0


def test_booted_hosts_count_every_host_of_every_entry():
    assert room.booted_hosts(spec(("v4-8", 3), ("v4-16", 2))) == 3 + 2 * 2
    assert room.booted_hosts(spec(("v4-8", 600), ("v4-8", 400), boot_hosts=False)) == 0


def test_more_hosts_than_the_machine_holds_are_refused_saying_how_many_it_holds():
    with pytest.raises(SpecError) as refused:
        room.check_room(spec(("v4-8", 30), ("v4-16", 10)), memory_bytes=24 * GIB, cores=2)
    assert refused.value.exit_code == 2
    assert "boots 50 simulated hosts" in str(refused.value) and "holds about 32" in str(refused.value)
    assert "simulation.boot_hosts: false" in str(refused.value)
    room.check_room(spec(("v4-8", 32)), memory_bytes=24 * GIB, cores=2)  # exactly the room
    room.check_room(spec(("v4-8", 1024), boot_hosts=False), memory_bytes=24 * GIB, cores=2)  # no hosts booted


def test_up_refuses_before_anything_is_created(tmp_path, podmanager_home, monkeypatch):
    monkeypatch.setattr(room, "machine_cores", lambda: 2)
    too_big = tmp_path / "big.yaml"
    too_big.write_text("name: big\nslices:\n  - {accelerator: v4-8, count: 600}\n  - {accelerator: v4-8, count: 400}\n")
    result = CliRunner().invoke(app, ["up", "-f", str(too_big), "--dry-run"])
    assert result.exit_code == 2, result.output
    assert "this dry run boots 1000 simulated hosts" in result.output and "boot_hosts: false" in result.output
    assert not (podmanager_home / "sim").exists()  # no emulator started, no simulated cloud
    assert StateStore().list_clusters() == [] and StateStore().events("big") == []
