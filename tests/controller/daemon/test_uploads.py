"""The working dirs sent to the controller (`controller/daemon/uploads.py`, `controller/daemon/channel_service.py`): kept as
the zip the client packed, never unpacked on the controller, checked before they are kept,
and removed once no submit can need them."""

from __future__ import annotations

import os
import stat
import time

import pytest
from zips import zipped

from podmanager.controller.daemon import uploads
from podmanager.controller.daemon.channel_service import ControllerChannelApi
from podmanager.core import code_zip
from podmanager.core.errors import PodmanagerError, SpecError
from podmanager.core.workload import Workload
from podmanager.state import StateStore


def test_an_upload_is_kept_as_its_zip_owner_only_and_taken_by_its_digest() -> None:
    api = ControllerChannelApi(StateStore())
    data = zipped({"train.py": b"print(1)\n", "pkg/m.py": b"x = 1\n"})
    digest = api.keep_code(data).digest
    assert [p.name for p in uploads.uploads_dir().iterdir()] == [f"{digest}.zip"]  # nothing unpacked
    assert stat.S_IMODE(uploads.upload_path(digest).stat().st_mode) == 0o600
    code, path = uploads.take(digest)
    assert (code.data, code.files, path) == (data, {"train.py", "pkg/m.py"}, uploads.upload_path(digest))
    with pytest.raises(PodmanagerError, match="holds no code"):
        uploads.take("0" * 64)
    with pytest.raises(SpecError, match="not the digest of an upload"):
        uploads.take("../clusters/c")


def test_a_zip_that_unpacks_too_large_is_refused_before_it_is_kept(monkeypatch) -> None:
    monkeypatch.setattr(code_zip, "MAX_UNPACKED_BYTES", 1 << 20)
    with pytest.raises(SpecError, match="unpacks to 2 MiB") as refused:
        ControllerChannelApi(StateStore()).keep_code(zipped({"zeros.bin": b"\0" * (2 << 20)}))
    assert refused.value.exit_code == 2 and list(uploads.uploads_dir().iterdir()) == []


def test_uploads_no_submit_can_need_are_removed_at_the_next_send() -> None:
    old = uploads.keep(zipped({"a.py": b"old"}))
    left = uploads.uploads_dir() / "0123abcd"  # an older controller's unpacked upload
    (left / "pkg").mkdir(parents=True)
    (left / "pkg" / "m.py").write_text("x")
    long_ago = time.time() - uploads.UPLOAD_KEEP_S - 1
    for path in (uploads.upload_path(old.digest), left):
        os.utime(path, (long_ago, long_ago))
    again = uploads.keep(zipped({"b.py": b"new"}))
    assert [p.name for p in uploads.uploads_dir().iterdir()] == [f"{again.digest}.zip"]
    # Sent again, an upload is kept again: its time starts anew.
    os.utime(uploads.upload_path(again.digest), (long_ago, long_ago))
    uploads.keep(zipped({"b.py": b"new"}))
    assert uploads.sweep() == [] and uploads.upload_path(again.digest).is_file()


def test_a_submit_names_the_upload_as_its_working_dir_and_hands_the_zip_on(monkeypatch) -> None:
    from podmanager.controller.daemon import channel_service

    code = uploads.keep(zipped({"train.py": b""}))
    workload, handed = channel_service.uploaded(Workload(entrypoint="train.py", working_dir="."), code.digest)
    assert handed == code and workload.working_dir == str(uploads.upload_path(code.digest))
    workload.check_program(handed.files)  # the folder is the client's: only what was shipped is checked here
    with pytest.raises(SpecError, match="other.py is not among the files of the working dir shipped"):
        workload.model_copy(update={"entrypoint": "other.py"}).check_program(handed.files)
