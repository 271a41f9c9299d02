"""A host the Ray head refuses for its version reports a boot error with Ray's own message
(issue 37): before, the join raised, its restart loop tried again, and the host sat in
`joining` for ever while `up` waited for it."""

from __future__ import annotations

import pytest

from podmanager.vm import boot_status, join

REFUSAL = ("Version mismatch: The cluster was started with:\n    Ray: 2.60.0\n    Python: 3.11.7\n"
           "This process on node 10.0.0.2 was started with:\n    Ray: 2.51.0\n    Python: 3.10.12\n")


def test_a_version_mismatch_is_the_hosts_boot_error(monkeypatch):
    from ray.scripts.scripts import cli

    def refuse(**_: object) -> None:
        raise RuntimeError(REFUSAL)

    reported: list[tuple[str, str]] = []
    monkeypatch.setattr(cli, "main", refuse)
    monkeypatch.setattr(boot_status, "report", lambda stage, detail="": reported.append((stage, detail)))
    code = join.run_ray_start(["start", "--address=10.0.0.1:6379"], "10.0.0.1:6379", report_boot=True)
    assert code == join.EXIT_VERSION_MISMATCH
    [(stage, detail)] = reported
    assert stage == "error"
    assert detail.startswith("the Ray head refused this host: Version mismatch")
    assert "Ray: 2.60.0; Python: 3.11.7" in detail and "Ray: 2.51.0; Python: 3.10.12" in detail


def test_any_other_error_of_ray_start_is_not_taken_for_one(monkeypatch):
    from ray.scripts.scripts import cli

    def broken(**_: object) -> None:
        raise RuntimeError("something else")

    monkeypatch.setattr(cli, "main", broken)
    with pytest.raises(RuntimeError, match="something else"):
        join.run_ray_start(["start"], "10.0.0.1:6379", report_boot=True)
