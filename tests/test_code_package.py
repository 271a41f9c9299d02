"""The run's working dir as it is packed at submit (`attempts/package.py`): Python environments
stay out whatever their folder is called, and what the packing says is in podmanager's terms,
never Ray's advice to call `ray.init(runtime_env=...)`."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from ray._private.runtime_env import packaging

from podmanager.attempts import package


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    for name, text in {"train.py": "print(1)\n", "lib/util.py": "X = 1\n",
                       "venv2/pyvenv.cfg": "home = /usr/bin\n", "venv2/lib/site.py": "\n",
                       "tools/py311/pyvenv.cfg": "home = /usr/bin\n", "tools/py311/bin/python": "",
                       "env3/conda-meta/history": "\n", "env3/lib/x.py": "\n",
                       "notes/conda-meta.txt": "not an environment\n"}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.fixture
def no_cluster(monkeypatch):
    """Ray's store of packages, faked: `upload` packs and hashes for real, stores nothing."""
    stored: list[str] = []
    monkeypatch.setattr(packaging, "pin_runtime_env_uri", lambda uri, **kw: None)
    monkeypatch.setattr(packaging, "package_exists", lambda uri: False)
    monkeypatch.setattr(packaging, "upload_package_to_gcs", lambda uri, data: stored.append(uri))
    return stored


def test_a_virtualenv_or_conda_env_is_not_shipped_whatever_its_name(project: Path, no_cluster) -> None:
    code = package.upload(project)
    assert sorted(code.files) == ["lib/util.py", "notes/conda-meta.txt", "train.py"]
    assert sorted(package.environment_folders(project)) == ["env3", "tools/py311", "venv2"]
    # What is not shipped is not hashed either: a change in an environment is not a new package.
    (project / "venv2" / "lib" / "site.py").write_text("changed\n")
    assert package.upload(project).uri == code.uri


def test_a_large_file_is_named_in_podmanagers_terms_not_rays(project: Path, no_cluster, caplog, capsys) -> None:
    (project / "weights.bin").write_bytes(b"\0" * (10 << 20))
    with caplog.at_level(logging.DEBUG):
        code = package.upload(project)
    assert "weights.bin" in code.files
    said = caplog.text + capsys.readouterr().err
    assert "ray.init" not in said and "runtime_env" not in said
    assert "weights.bin is 10 MiB and goes to every host with each run" in said and ".gitignore" in said
