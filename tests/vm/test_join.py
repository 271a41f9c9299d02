"""vm/join.py: the `ray start` a host joins with, and a join that gives up at its deadline
when the head cannot be reached."""

from __future__ import annotations

import time

from podmanager.vm import join


def test_ray_start_args():
    args = join.ray_start_args(
        "127.0.0.1:1", resources={"TPU": 4}, num_cpus=1, object_store_memory=80, temp_dir="/tmp/pm-x", agent_port=5
    )
    assert "--dashboard-agent-listen-port=5" in args
    assert args[:2] == ["start", "--address=127.0.0.1:1"]
    assert '--resources={"TPU": 4}' in args and "--temp-dir=/tmp/pm-x" in args


def test_join_gives_up_at_its_deadline_when_head_is_unreachable():
    started = time.monotonic()
    assert join.main(["--address", "127.0.0.1:9", "--deadline", "0.5"]) == join.EXIT_HEAD_UNREACHABLE
    assert time.monotonic() - started < 5
