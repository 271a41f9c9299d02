"""A host's output is complete, whatever its volume and however the program ends, on a dry-run
cluster of real local Ray hosts, through the CLI: `logs` has every line, the failure summary
the traceback, and what a cancelled program prints while stopping reaches the logs."""

from __future__ import annotations

import re
import textwrap
from collections import defaultdict

import pytest
from ray_fixtures import module_cluster
from typer.testing import CliRunner

from podmanager.cli import app
from podmanager.core.clock import poll_until

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

SPEC = {
    "name": "outtest",
    "backend": "simulated",
    "simulation": {"create_latency_s": 0.0, "delete_latency_s": 0.0},
    "recovery": {"max_failures": 0, "max_hangs": 0, "max_preemptions": 0},
    "slices": [{"accelerator": "v4-16"}],  # 2 hosts
}

home, cluster, _shared_home = module_cluster(SPEC)

LINE = "{rank} line {i:07d} " + "x" * 80  # ~100 bytes


def expected(rank: int, count: int) -> list[str]:
    return [LINE.format(rank=rank, i=i) for i in range(count)]


def host_lines(output: str) -> dict[str, list[str]]:
    """`podmanager logs` output, by host."""
    by_host: dict[str, list[str]] = defaultdict(list)
    for line in output.splitlines():
        host, _, text = line.partition("] ")
        by_host[host.removeprefix("[")].append(text)
    return by_host


def run_id_of(output: str) -> str:
    return re.search(r"podmanager logs -c outtest --run (\S+)", output).group(1)


def test_ten_megabytes_from_every_host_all_reach_the_logs(cluster, tmp_path):
    (tmp_path / "big.py").write_text(textwrap.dedent(f"""
        import os
        rank = int(os.environ["JAX_PROCESS_ID"])
        for i in range(100_000):
            print({LINE!r}.format(rank=rank, i=i))
    """))
    runner = CliRunner()
    run = runner.invoke(app, ["run", "-c", "outtest", "--working-dir", str(tmp_path), "big.py"])
    assert run.exit_code == 0, run.output[-3000:]
    # The live stream could not show 10 MB as it came: it says so, and where every line is.
    run_id = run_id_of(run.output)
    assert re.search(rf"podmanager: \d+ line\(s\) skipped here to keep up; every line is in "
                     rf"'podmanager logs -c outtest --run {run_id} --host slice-0/host-0'", run.output)
    logs = runner.invoke(app, ["logs", "-c", "outtest", "--run", run_id])
    assert logs.exit_code == 0
    by_host = host_lines(logs.output)
    assert set(by_host) == {"slice-0/host-0", "slice-0/host-1"}
    assert by_host["slice-0/host-0"] == expected(0, 100_000)
    assert by_host["slice-0/host-1"] == expected(1, 100_000)


def test_three_megabytes_then_a_raise_keeps_every_line_and_shows_the_traceback(cluster, tmp_path):
    marker = tmp_path / "host-0-wrote-all"
    (tmp_path / "burst.py").write_text(textwrap.dedent(f"""
        import os, pathlib, time
        rank = int(os.environ["JAX_PROCESS_ID"])
        for i in range(30_000):
            print({LINE!r}.format(rank=rank, i=i))
        if rank == 0:
            print("host 0 waits", flush=True)
            pathlib.Path({str(marker)!r}).touch()
            time.sleep(600)
        while not pathlib.Path({str(marker)!r}).exists():  # so host 0 has written all of it when stopped
            time.sleep(0.05)
        raise ValueError("boom after 3 MB")
    """))
    runner = CliRunner()
    run = runner.invoke(app, ["run", "-c", "outtest", "--working-dir", str(tmp_path), "burst.py"])
    assert run.exit_code == 1, run.output[-3000:]
    summary = run.output[run.output.index("last output of slice-0/host-1:"):]
    assert "  Traceback (most recent call last):" in summary and "  ValueError: boom after 3 MB" in summary
    logs = runner.invoke(app, ["logs", "-c", "outtest", "--run", run_id_of(run.output)])
    by_host = host_lines(logs.output)
    assert by_host["slice-0/host-0"] == expected(0, 30_000) + ["host 0 waits"]
    failed = by_host["slice-0/host-1"]
    assert failed[:30_000] == expected(1, 30_000)
    assert failed[30_000] == "Traceback (most recent call last):" and failed[-1] == "ValueError: boom after 3 MB"


def test_what_a_cancelled_program_prints_while_stopping_reaches_the_logs(cluster, tmp_path):
    (tmp_path / "saver.py").write_text(textwrap.dedent("""
        import signal, sys, time
        def save(*_):
            print("saving checkpoint...", flush=True)
            time.sleep(0.5)
            print("saved", flush=True)
            sys.exit(0)
        signal.signal(signal.SIGTERM, save)
        print("ready", flush=True)
        time.sleep(600)
    """))
    runner = CliRunner()
    submitted = runner.invoke(app, ["run", "-c", "outtest", "--detach", "--working-dir", str(tmp_path), "saver.py"])
    assert submitted.exit_code == 0, submitted.output
    run_id = re.search(r"submitted run (\S+)", submitted.output).group(1)

    def both_ready() -> bool:
        logs = runner.invoke(app, ["logs", "-c", "outtest", "--run", run_id])
        return logs.exit_code == 0 and logs.output.count("] ready\n") == 2

    poll_until(both_ready, timeout_s=120, interval_s=0.5, what="both hosts printing 'ready'")
    cancelled = runner.invoke(app, ["cancel", run_id, "-c", "outtest"])
    assert cancelled.exit_code == 0 and "is cancelled" in cancelled.output
    by_host = host_lines(runner.invoke(app, ["logs", "-c", "outtest", "--run", run_id]).output)
    assert by_host == {host: ["ready", "saving checkpoint...", "saved"] for host in ("slice-0/host-0", "slice-0/host-1")}
