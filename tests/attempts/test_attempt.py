"""attempts/attempt.py: the attempt runner on fake agents: success, fail fast, stop, the health monitor,
re-attach, setup: no Ray, no processes."""

from __future__ import annotations

import pytest
from fake_hosts import Behaviour, FakeRemote, agents

from podmanager.attempts.attempt import AttemptRunner
from podmanager.attempts.gang import Gang
from podmanager.core.workload import Workload
from podmanager.vm.host_wire import RunSetup

RUN = RunSetup(run_id="run-1", workload=Workload(command=["train"], working_dir=None))


@pytest.fixture
def remote():
    return FakeRemote()


def runner(remote, **options) -> AttemptRunner:
    workload = Workload(command=["train"], working_dir=None)
    return AttemptRunner("c", workload, "run-1", simulated=True, checkpoint_dir="/ck", poll_interval_s=0.0,
                         remote=remote, **options)


def test_an_attempt_where_every_host_exits_0_succeeds_with_its_steps(remote):
    hosts = agents(lambda s, attempt: Behaviour(polls=4, first_step=11))
    result = runner(remote).run_attempt(hosts, 0)
    assert result.status == "succeeded" and result.failure is None
    assert (result.first_step, result.last_step) == (11, 14)
    assert [h.exit_code for h in result.hosts] == [0, 0]


def test_a_dry_runs_hosts_share_the_clusters_compile_cache_and_a_cloud_runs_get_none_from_the_launch(
        remote, podmanager_home):
    hosts = agents(lambda s, attempt: Behaviour(polls=1))
    runner(remote).run_attempt(hosts, 0)
    shared = str(podmanager_home / "clusters" / "c" / "jax-cache")
    assert [a.started[0]["JAX_COMPILATION_CACHE_DIR"] for _, a in hosts] == [shared, shared]
    assert {a.started[0]["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] for _, a in hosts} == {"0"}  # every compile kept
    hosts = agents(lambda s, attempt: Behaviour(polls=1))
    AttemptRunner("c", Workload(command=["train"], working_dir=None), "run-1", simulated=False, checkpoint_dir=None,
                  poll_interval_s=0.0, remote=remote).run_attempt(hosts, 0)
    assert not any("JAX_COMPILATION_CACHE_DIR" in a.started[0] for _, a in hosts)  # each host's own (hosts/runs.py)


def test_an_attempt_whose_hosts_report_different_steps_is_at_the_step_all_have_reached(remote):
    hosts = agents(lambda s, attempt: Behaviour(polls=4, first_step=11 + s.slice_index))  # slice 1 is ahead
    result = runner(remote).run_attempt(hosts, 0)
    assert (result.first_step, result.last_step) == (11, 14)
    assert (result.first_step_time, result.last_step_time, result.last_loss) == (1011.0, 1014.0, 1 / 14)


def test_one_failing_host_stops_its_siblings_at_once_and_is_named(remote):
    hosts = agents(lambda s, attempt: Behaviour(polls=2 if s.slice_index == 1 else 100,
                                                exit_code=1 if s.slice_index == 1 else 0,
                                                lines=["loading", "Traceback: boom"]))
    result = runner(remote, failure_grace_s=0.5).run_attempt(hosts, 0)
    assert result.status == "failed" and result.failed_host == "slice-1/host-0"
    assert result.failure == "exited with code 1" and result.last_lines == ["loading", "Traceback: boom"]
    assert hosts[0][1].stops == [0.5]  # the survivor gets the short failure grace
    assert result.detected_at is not None


def test_a_program_stopped_by_a_preemption_notice_gives_its_peers_the_full_grace(remote):
    hosts = agents(lambda s, attempt: Behaviour(polls=2 if s.slice_index == 0 else 100,
                                                exit_code=75 if s.slice_index == 0 else 0))
    runner(remote, stop_grace_s=9.0, failure_grace_s=0.5).run_attempt(hosts, 0)
    assert hosts[1][1].stops == [9.0]


def test_the_health_monitor_can_end_an_attempt(remote):
    hosts = agents(lambda s, attempt: Behaviour(polls=100))

    class Monitor:
        def __init__(self):
            self.checks = 0

        def check(self):
            self.checks += 1
            return "slice 1 is PREEMPTED" if self.checks >= 3 else None

    result = runner(remote).run_attempt(hosts, 0, lambda gang: Monitor())
    assert result.status == "failed" and result.failure == "slice 1 is PREEMPTED"
    assert all(a.stops for _, a in hosts)


def test_reattaching_watches_the_running_processes_without_launching_again(remote):
    hosts = agents(lambda s, attempt: Behaviour(polls=3, lines=["one", "two", "three"]))
    first = runner(remote)
    gang = Gang(hosts, "run-1", remote=remote)
    gang.start(RUN, 2, [{"PODMANAGER_ATTEMPT": "2"}] * 2)
    gang.poll(wait_s=0)  # the old supervisor saw "one", then died
    launched = [len(a.started) for _, a in hosts]

    told = []
    result = first.run_attempt(hosts, 2, on_launched=lambda: told.append(True),
                               reattach={"slice-0/host-0": len("one\n"), "slice-1/host-0": len("one\n")})
    assert [len(a.started) for _, a in hosts] == launched  # nothing started twice
    assert told == [True] and result.status == "succeeded"
    logged = first.logs.path(hosts[0][0]).read_text()
    assert logged == "two\nthree\n"  # the output already kept is not kept again


def test_the_setup_is_reported_done_before_any_program_starts(remote):
    hosts = agents(lambda s, attempt: Behaviour(polls=2))
    told: list[tuple[float, list[str], int]] = []
    result = runner(remote).run_attempt(hosts, 0, on_setup_done=lambda seconds, installed: told.append(
        (seconds, installed, sum(len(a.started) for _, a in hosts))))
    assert result.status == "succeeded"
    assert told == [(result.setup_s, result.setup_installed, 0)]  # no program had started yet
