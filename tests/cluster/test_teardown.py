"""cluster/teardown.py: `down` by label searches every simulated project, one whose emulator
serves but has saved nothing yet included."""

from __future__ import annotations


def test_down_searches_a_simulated_project_whose_emulator_has_not_saved_yet(podmanager_home):
    from podmanager.cluster.teardown import simulated_projects

    (podmanager_home / "sim" / "emulators").mkdir(parents=True)
    (podmanager_home / "sim" / "saved-project.json").write_text("{}")
    (podmanager_home / "sim" / "emulators" / "serving-project.json").write_text("{}")  # serves, saved nothing yet
    (podmanager_home / "sim" / "emulators" / "serving-project.log").write_text("")
    assert simulated_projects() == ["saved-project", "serving-project"]
