"""The run's working dir as it is packed, once, where the user runs podmanager
(`core/code_zip.py`), and as the controller checks a zip packed elsewhere: one rule for
what is shipped (never podmanager's home, never a link leaving the folder, never an
environment), credentials named, sizes checked before anything is sent."""

from __future__ import annotations

import io
import logging
import os
import time
import zipfile
from pathlib import Path

import pytest
from zips import zipped

from podmanager.core import code_zip
from podmanager.core.errors import SpecError


def write(root: Path, files: dict[str, str | bytes]) -> Path:
    for name, content in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            (root / name).write_bytes(content)
        else:
            (root / name).write_text(content)
    return root


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return write(tmp_path / "project", {
        "train.py": "print(1)\n", "lib/util.py": "X = 1\n",
        "venv2/pyvenv.cfg": "home = /usr/bin\n", "venv2/lib/site.py": "\n",
        "tools/py311/pyvenv.cfg": "home = /usr/bin\n", "tools/py311/bin/python": "",
        "env3/conda-meta/history": "\n", "env3/lib/x.py": "\n",
        "notes/conda-meta.txt": "not an environment\n"})


def names(code: code_zip.PackedCode) -> list[str]:
    return sorted(zipfile.ZipFile(io.BytesIO(code.data)).namelist())


def test_a_virtualenv_or_conda_env_is_not_shipped_whatever_its_name(project: Path) -> None:
    code = code_zip.pack(project)
    assert sorted(code.files) == names(code) == ["lib/util.py", "notes/conda-meta.txt", "train.py"]
    # What is not shipped is not hashed either: a change in an environment is not new code.
    (project / "venv2" / "lib" / "site.py").write_text("changed\n")
    assert code_zip.pack(project).digest == code.digest


def test_the_zip_and_its_digest_depend_on_the_files_alone(project: Path) -> None:
    code = code_zip.pack(project)
    os.utime(project / "train.py", (time.time() + 100, time.time() + 100))
    assert code_zip.pack(project).data == code.data
    (project / "train.py").write_text("print(2)\n")
    assert code_zip.pack(project).digest != code.digest


def test_nested_ignore_files_are_honoured(tmp_path: Path) -> None:
    root = write(tmp_path / "p", {"a/keep.py": "", "a/skip.log": "", "a/.rayignore": "*.log\n",
                                  "__pycache__/x.pyc": "", ".git/config": "", "data/big.bin": "x",
                                  ".gitignore": "data/\n"})
    assert sorted(code_zip.pack(root).files) == [".gitignore", "a/.rayignore", "a/keep.py"]


def test_podmanagers_home_and_the_simulated_clouds_folder_inside_the_working_dir_are_never_shipped(
        tmp_path: Path, monkeypatch) -> None:
    """`cd ~ && podmanager run` with the default home: ~/.podmanager is inside the working dir."""
    user = write(tmp_path / "user", {"train.py": "", ".podmanager/clusters/c/ray_token": "secret-token",
                                     ".podmanager/state.db": "db", "sim/project.json": "{}",
                                     "sim/buckets/b/o": "x"})
    monkeypatch.setenv("PODMANAGER_HOME", str(user / ".podmanager"))
    monkeypatch.setenv("PODMANAGER_SIM_HOME", str(user / "sim"))
    (user / "token").symlink_to(user / ".podmanager" / "clusters" / "c" / "ray_token")  # a link into it too
    assert sorted(code_zip.pack(user).files) == ["train.py"]


def test_a_working_dir_inside_podmanagers_home_is_refused(tmp_path: Path, monkeypatch) -> None:
    home = write(tmp_path / "home", {"clusters/c/ray_token": "t"})
    monkeypatch.setenv("PODMANAGER_HOME", str(home))
    with pytest.raises(SpecError, match="inside podmanager's folder") as refused:
        code_zip.pack(home / "clusters")
    assert refused.value.exit_code == 2


def test_links_leaving_the_folder_are_skipped_and_named_and_a_parent_link_does_not_loop(
        tmp_path: Path, caplog) -> None:
    outside = write(tmp_path / "outside", {"shadow": "root:x:0", "lots/of.py": ""})
    root = write(tmp_path / "proj", {"train.py": "", "src/mypkg/__init__.py": "X = 1\n", "conf/a.yaml": "a: 1\n"})
    (root / "up").symlink_to("..")  # the parent: the whole tmp_path, this folder included
    (root / "shadow").symlink_to(outside / "shadow")
    (root / "elsewhere").symlink_to(outside / "lots")
    (root / "dangling").symlink_to(root / "nothing-here")
    (root / "mypkg").symlink_to("src/mypkg")  # inside: shipped under the link's name too
    (root / "a.yaml").symlink_to("conf/a.yaml")
    (root / "src" / "mypkg" / "self").symlink_to(".")  # inside, but back into a folder it is in
    started = time.monotonic()
    with caplog.at_level(logging.WARNING):
        code = code_zip.pack(root)
    assert time.monotonic() - started < 5  # no walk of the parent, again and again
    assert sorted(code.files) == ["a.yaml", "conf/a.yaml", "mypkg/__init__.py", "src/mypkg/__init__.py", "train.py"]
    assert zipfile.ZipFile(io.BytesIO(code.data)).read("a.yaml") == b"a: 1\n"  # the target's content
    for link in ("up", "shadow", "elsewhere"):
        assert f"{root}/{link} is a link that is not shipped: it leads outside the folder" in caplog.text
    assert f"{root}/dangling is a link that is not shipped: it points to nothing" in caplog.text
    assert f"{root}/src/mypkg/self is a link that is not shipped: it leads back into" in caplog.text


def test_files_that_look_like_credentials_are_shipped_but_named_unless_ignored(tmp_path: Path, caplog) -> None:
    root = write(tmp_path / "proj", {"train.py": "", ".env": "TOKEN=1", "secrets.json": "{}", "keys/tls.pem": "",
                                     "sa-key.json": "{}", "credentials": "", ".netrc": "", "ignored.env": "",
                                     ".gitignore": "ignored.env\n", "keyboard.py": ""})
    with caplog.at_level(logging.WARNING):
        code = code_zip.pack(root)
    named = [".env", ".netrc", "credentials", "keys/tls.pem", "sa-key.json", "secrets.json"]
    assert set(named) <= code.files and "ignored.env" not in code.files
    [warning] = [r.getMessage() for r in caplog.records if "credentials" in r.getMessage()]
    assert warning.startswith(", ".join(named) + " look(s) like credentials") and ".gitignore" in warning
    assert "ignored.env" not in warning and "keyboard.py" not in warning and "train.py" not in warning


def test_a_folder_too_large_unpacked_is_refused_before_anything_is_zipped(tmp_path: Path, monkeypatch) -> None:
    """A file of zeros zips to almost nothing, but every host unpacks all of it."""
    monkeypatch.setattr(code_zip, "MAX_UNPACKED_BYTES", 2 << 20)
    root = write(tmp_path / "proj", {"train.py": "", "data/zeros.bin": b"\0" * (3 << 20), "small.txt": "x" * 2048})
    monkeypatch.setattr(zipfile.ZipFile, "open", lambda *a, **k: pytest.fail("zipped before the size was checked"))
    with pytest.raises(SpecError) as refused:
        code_zip.pack(root)
    assert refused.value.exit_code == 2
    message = refused.value.message
    assert message.startswith(f"--working-dir: {root} holds 3 MiB to ship, more than the 2 MiB unpacked on every host")
    assert "the biggest: data/zeros.bin (3 MiB), small.txt (2 KiB)" in message
    assert ".gitignore" in (refused.value.hint or "")


def test_a_folder_too_large_zipped_is_refused(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(code_zip, "MAX_ZIP_BYTES", 1 << 20)
    root = write(tmp_path / "proj", {"train.py": "", "noise.bin": os.urandom(2 << 20)})
    with pytest.raises(SpecError, match="packs to more than the 1 MiB zipped that is sent to every host; "
                                        r"the biggest: noise.bin \(2 MiB\)"):
        code_zip.pack(root)


def test_a_large_file_is_named_in_podmanagers_terms(project: Path, caplog) -> None:
    (project / "weights.bin").write_bytes(b"\0" * (10 << 20))
    with caplog.at_level(logging.DEBUG):
        code = code_zip.pack(project)
    assert "weights.bin" in code.files
    assert "weights.bin is 10 MiB and goes to every host with each run" in caplog.text and ".gitignore" in caplog.text


def test_a_zip_packed_elsewhere_is_checked_before_it_is_kept(monkeypatch) -> None:
    code = code_zip.received(zipped({"train.py": b"", "pkg/m.py": b"x"}))
    assert code.files == {"train.py", "pkg/m.py"} and len(code.digest) == 64
    with pytest.raises(SpecError, match="outside its folder"):
        code_zip.received(zipped({"../evil.py": b""}))
    with pytest.raises(SpecError, match="no readable zip"):
        code_zip.received(b"not a zip")
    monkeypatch.setattr(code_zip, "MAX_UNPACKED_BYTES", 1 << 20)
    with pytest.raises(SpecError, match="unpacks to 2 MiB, more than the 1 MiB unpacked on every host") as bomb:
        code_zip.received(zipped({"zeros.bin": b"\0" * (2 << 20)}))
    assert bomb.value.exit_code == 2
