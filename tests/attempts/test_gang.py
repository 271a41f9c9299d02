"""attempts/gang.py: the gang of one attempt's host processes on fake agents: launch, poll, a lost host,
notices: no Ray, no processes."""

from __future__ import annotations

import pytest
from fake_hosts import Behaviour, FakeRemote, agents

from podmanager.attempts.gang import Gang
from podmanager.core.workload import Workload
from podmanager.vm.host_wire import RunSetup

RUN = RunSetup(run_id="run-1", workload=Workload(command=["train"], working_dir=None))


@pytest.fixture
def remote():
    return FakeRemote()


def test_the_gang_starts_every_host_with_its_own_env_and_polls_until_all_exit(remote):
    hosts = agents(lambda s, attempt: Behaviour(polls=2, lines=[f"hello from {s.label}", "bye"]))
    gang = Gang(hosts, "run-1", remote=remote)
    gang.start(RUN, 0, [{"PODMANAGER_ATTEMPT": "0", "JAX_PROCESS_ID": str(i)} for i in range(2)])
    seen: list[tuple[str, str]] = []
    for _ in range(3):
        gang.poll(lambda s, text: seen.append((s.label, text)), wait_s=0)
    assert [h.running for h in gang.hosts] == [False, False] and [h.exit_code for h in gang.hosts] == [0, 0]
    assert [a.started[0]["JAX_PROCESS_ID"] for _, a in hosts] == ["0", "1"]
    assert ("slice-1/host-0", b"hello from slice-1/host-0\n") in seen
    assert gang.hosts[0].last_lines == ["hello from slice-0/host-0", "bye"]
    assert gang.hosts[0].progress.step == 2 and gang.hosts[0].first_progress.step == 1


def test_a_host_that_does_not_answer_is_lost_without_stalling_the_others(remote):
    hosts = agents(lambda s, attempt: Behaviour(polls=5, silent=s.slice_index == 1))
    gang = Gang(hosts, "run-1", remote=remote, poll_timeout_s=0.0)
    gang.start(RUN, 0, [{"PODMANAGER_ATTEMPT": "0"}] * 2)
    gang.poll(wait_s=0)
    assert gang.hosts[0].progress.step == 1  # the answering host was heard
    assert gang.hosts[1].lost == "no answer for 0s" and not gang.hosts[1].running


def test_a_dead_agent_is_lost_with_the_reason_and_skipped_when_stopping(remote):
    hosts = agents(lambda s, attempt: Behaviour(polls=5, lost_after=1 if s.slice_index == 0 else None))
    gang = Gang(hosts, "run-1", remote=remote)
    gang.start(RUN, 0, [{"PODMANAGER_ATTEMPT": "0"}] * 2)
    gang.poll(wait_s=0)
    gang.poll(wait_s=0)
    assert gang.hosts[0].lost.startswith("RayActorError")
    gang.stop(grace_s=3.0)
    assert hosts[0][1].stops == [] and hosts[1][1].stops == [3.0]
    assert gang.hosts[1].exit_code == -15 and not gang.hosts[1].running


def test_an_agent_that_answers_a_poll_with_an_error_loses_its_host_not_the_gang(remote):
    # A host's agent started afresh (its host restarted) holds no process of the run: the host is
    # lost with the agent's reason, and the gang's supervisor goes on to recover (CI once saw a
    # supervisor stop with the agent's KeyError).
    hosts = agents(lambda s, attempt: Behaviour(polls=5, forgot_after=1 if s.slice_index == 0 else None))
    gang = Gang(hosts, "run-1", remote=remote)
    gang.start(RUN, 0, [{"PODMANAGER_ATTEMPT": "0"}] * 2)
    gang.poll(wait_s=0)
    gang.poll(wait_s=0)
    assert gang.hosts[0].lost == "the host's agent failed to poll: this host's agent holds no process of run run-1"
    assert not gang.hosts[0].running and gang.hosts[1].running and not gang.hosts[1].lost


def test_any_notice_asks_the_hosts_of_that_slice_only(remote):
    hosts = agents(lambda s, attempt: Behaviour())
    gang = Gang(hosts, "run-1", remote=remote)
    hosts[1][1].notice = True
    assert gang.any_notice(1) and not gang.any_notice(0)
