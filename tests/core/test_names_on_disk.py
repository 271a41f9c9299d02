"""Names that become files under $PODMANAGER_HOME (issue 34, item 4): a spec's project, zones
and names are checked before anything is written or started, and every path built from a
cluster's or project's name refuses one that would lead out of its folder."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from podmanager.cli import app
from podmanager.core import paths
from podmanager.core.errors import SpecError
from podmanager.emulator import record


def test_up_of_a_project_that_climbs_out_is_exit_2_before_anything_is_written(tmp_path, podmanager_home):
    project_folder = tmp_path / "work"
    project_folder.mkdir()
    spec = project_folder / "cluster.yaml"
    spec.write_text("name: escape\nproject: ../../../escape\nslices:\n  - accelerator: v4-8\n")
    result = CliRunner().invoke(app, ["up", "-f", str(spec), "--dry-run"])
    assert result.exit_code == 2
    assert "project: '../../../escape' is not a Google Cloud project id" in result.output
    assert "6-30 lowercase letters, digits or '-', starting with a letter" in result.output
    # Where the simulated cloud and the emulator's record would have gone: three levels up.
    assert [p.name for p in tmp_path.iterdir() if p.name != "pmhome"] == ["work"]
    assert not list(tmp_path.parent.glob("escape.*"))
    assert not (podmanager_home / "sim").exists()  # no emulator, no simulated cloud
    assert not (podmanager_home / "clusters").exists()


@pytest.mark.parametrize("name", ["../x", "a/b", "..", ".hidden", "", "a\0b"])
def test_a_path_from_a_name_refuses_one_that_leads_out(name):
    for build in (paths.cluster_dir, paths.cluster_path, paths.sim_state_path, record.record_path, record.log_path):
        with pytest.raises(SpecError, match="cannot name a file"):
            build(name)


def test_a_plain_name_gives_its_folder_and_a_reader_makes_none(podmanager_home):
    assert paths.cluster_path("demo") == podmanager_home / "clusters" / "demo"
    assert not (podmanager_home / "clusters" / "demo").exists()
    assert paths.cluster_dir("demo").is_dir()
    assert paths.sim_state_path("my-project") == podmanager_home / "sim" / "my-project.json"
