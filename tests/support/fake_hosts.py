"""Fake host agents and a fake `Remote`: what the gang, the attempt runner and the supervisor
see of the hosts, scripted per attempt, with no Ray.

A `FakeAgent` answers the agent's methods (`agent.poll_workload.remote(...)` and so on) like
`vm/agent.py` does, from a `Behaviour` per attempt: how many polls its process runs, its
exit code, its steps, whether it stops answering or its node dies.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from podmanager.core.records import HostSlot
from podmanager.runtime.contract import ProgressRecord
from podmanager.vm.environments import HostSetup
from podmanager.vm.host_wire import HeldRun, HostLaunch, PollReply, RunSetup


@dataclass
class Behaviour:
    polls: int = 3  # polls answered "running" before the process exits
    exit_code: int = 0
    first_step: int = 1  # the step it resumes at; one step per poll
    last_step: int | None = None  # it reports no step after this one (a host behind its peers)
    lines: list[str] = field(default_factory=list)  # output, one line per poll
    lost_after: int | None = None  # from this poll on, the agent's node is dead (RayActorError)
    silent: bool = False  # the agent never answers a poll
    forgot_after: int | None = None  # from this poll on, the agent is a new one that never started the run
    reply_bytes: int | None = None  # output sent per reply at most (the agent's chunk)
    on_stop: list[str] = field(default_factory=list)  # printed when stopped (a SIGTERM handler)
    on_sigterm: int | None = None  # a SIGTERM (a notice's) ends it with this code; None: it runs on
    says_done: bool = False  # its last progress record says the program has finished its work
    reports_steps: bool = True  # False: a plain command, which reports no progress
    checkpoint_every: int | None = None  # its progress carries the newest multiple of this step as a saved checkpoint


class FakeRef:
    def __init__(self, value: Any = None, error: BaseException | None = None, ready: bool = True):
        self.value, self.error, self.ready = value, error, ready


class FakeRemote:
    """`Remote` over FakeRefs: a ref is answered at once unless it is not ready."""

    def __init__(self) -> None:
        self.put_values: list[Any] = []

    def get(self, refs: Any, timeout: float | None = None) -> Any:
        if isinstance(refs, list):
            return [self._one(r) for r in refs]
        return self._one(refs)

    def _one(self, ref: FakeRef) -> Any:
        if not ref.ready:
            raise GetTimeoutError("no answer")
        if ref.error is not None:
            raise ref.error
        return ref.value

    def wait(self, refs: list[FakeRef], num_returns: int, timeout: float | None) -> tuple[list, list]:
        return [r for r in refs if r.ready], [r for r in refs if not r.ready]

    def put(self, value: Any) -> Any:
        self.put_values.append(value)
        return ("working-dir", len(self.put_values))


class _Method:
    def __init__(self, call: Callable[..., FakeRef]):
        self.call = call

    def remote(self, *args: Any) -> FakeRef:
        return self.call(*args)


class FakeAgent:
    """One host's agent. `script(attempt)` gives its behaviour in that attempt."""

    def __init__(self, slot: HostSlot, script: Callable[[int], Behaviour]):
        self.slot = slot
        self.script = script
        self.started: list[dict[str, str]] = []  # the env of every launch, in order
        self.stops: list[float] = []  # grace of every stop
        self.signals: list[int] = []
        self.holds: list[float] = []  # the hold of every poll, in order
        self.notice = False
        self.runs: dict[str, dict[str, Any]] = {}  # run id -> this host's process
        self.setups: list[str] = []  # the run id of every setup asked for, in order
        self.setup_report = HostSetup(True, 0.0)  # what every setup answers
        # (run id, attempt) -> the output file of a process an earlier agent here started (a
        # lost head takes the agents, not the files); a launch of that attempt here writes it anew.
        self.files: dict[tuple[str, int], bytes] = {}
        self.free_port = _Method(lambda: FakeRef(12345))
        self.setup_workload = _Method(self._setup)
        self.start_workload = _Method(self._start)
        self.poll_workload = _Method(self._poll)
        self.stop_workload = _Method(self._stop)
        self.workload_status = _Method(self._status)
        self.left_output = _Method(lambda run_id, attempt, offset: FakeRef(self.files.get((run_id, attempt), b"")[offset:]))
        self.preemption_notice = _Method(lambda: FakeRef("preempted" if self.notice else None))
        self.signal_workload = _Method(self._signal)

    def _setup(self, run: RunSetup, code: Any) -> FakeRef:
        """As `HostRuns.setup`: a run set up here once is found set up (nothing done) after."""
        run_id = run.run_id
        before = self.setup_report.ok and run_id in self.setups
        self.setups.append(run_id)
        return FakeRef(replace(self.setup_report, reused=True, already=True) if before else self.setup_report)

    def _start(self, launch: HostLaunch) -> FakeRef:
        run_id, attempt, env = launch.run_id, launch.attempt, launch.env
        self.started.append(env)
        self.files.pop((run_id, attempt), None)
        self.runs[run_id] = {"attempt": attempt, "behaviour": self.script(attempt), "polls": 0, "running": True,
                             "exit_code": None, "pid": 1000 + len(self.started), "output": "",
                             "asked_to_stop": False}
        return FakeRef(self.runs[run_id]["pid"])

    def _signal(self, run_id: str, signum: int) -> FakeRef:
        """As `HostRuns.signal`: a live process is told; one with a SIGTERM handler exits by it."""
        self.signals.append(signum)
        run = self.runs.get(run_id)
        if run is not None and run["running"] and signum == signal.SIGTERM:
            run["asked_to_stop"] = True
            if run["behaviour"].on_sigterm is not None:
                run["running"], run["exit_code"] = False, run["behaviour"].on_sigterm
        return FakeRef(None)

    def _poll(self, run_id: str, offset: int, hold_s: float) -> FakeRef:
        self.holds.append(hold_s)
        run = self.runs[run_id]
        behaviour: Behaviour = run["behaviour"]
        if behaviour.silent:
            return FakeRef(ready=False)
        if behaviour.lost_after is not None and run["polls"] >= behaviour.lost_after:
            return FakeRef(error=RayActorError())
        if behaviour.forgot_after is not None and run["polls"] >= behaviour.forgot_after:
            cause = LookupError("this host's agent holds no process of run run-1")
            return FakeRef(error=RayTaskError("poll_workload", f"Traceback ...\nLookupError: {cause}", cause))
        if run["running"]:
            if run["polls"] < len(behaviour.lines):
                run["output"] += behaviour.lines[run["polls"]] + "\n"
            run["polls"] += 1
            if run["polls"] >= behaviour.polls:
                run["running"], run["exit_code"] = False, behaviour.exit_code
        step = behaviour.first_step + run["polls"] - 1
        if behaviour.last_step is not None:
            step = min(step, behaviour.last_step)
        saved = step - step % behaviour.checkpoint_every if behaviour.checkpoint_every else None
        progress = ProgressRecord(step, 1000.0 + step, loss=1.0 / step, done=behaviour.says_done,
                                  checkpoint_step=saved or None, checkpoint_time=1000.5 + saved if saved else None) \
            if run["polls"] and behaviour.reports_steps else None
        first = ProgressRecord(behaviour.first_step, 1000.0 + behaviour.first_step, loss=1.0) if progress else None
        output = run["output"].encode()
        end = len(output)
        if behaviour.reply_bytes is not None and end - offset > behaviour.reply_bytes:
            end = output.rfind(b"\n", offset, offset + behaviour.reply_bytes) + 1 or offset + behaviour.reply_bytes
        return FakeRef(PollReply(running=run["running"], exit_code=run["exit_code"], pid=run["pid"],
                                 output=output[offset:end], offset=end, left=len(output) - end, progress=progress,
                                 first_progress=first,
                                 tail=() if run["running"] else tuple(run["output"].splitlines()[-30:]),
                                 asked_to_stop=run["asked_to_stop"]))

    def _stop(self, run_id: str, grace_s: float) -> FakeRef:
        self.stops.append(grace_s)
        run = self.runs.get(run_id)
        if run is None:
            return FakeRef(None)
        if run["running"]:
            run["running"], run["exit_code"], run["asked_to_stop"] = False, -15, True
            run["output"] += "".join(line + "\n" for line in run["behaviour"].on_stop)
        return FakeRef(run["exit_code"])

    def _status(self, run_id: str) -> FakeRef:
        run = self.runs.get(run_id)
        if run is None:
            return FakeRef(None)
        return FakeRef(HeldRun(run["attempt"], run["running"], run["exit_code"], run["pid"]))


def slot(slice_index: int, worker_id: int = 0) -> HostSlot:
    return HostSlot(slice_index, worker_id, f"c-s{slice_index}", "127.0.0.1", 4, "v4-8")


def agents(script: Callable[[HostSlot, int], Behaviour], slices: int = 2) -> list[tuple[HostSlot, FakeAgent]]:
    """One single-host agent per slice, each following `script(its slot, attempt)`."""
    out = []
    for i in range(slices):
        s = slot(i)
        out.append((s, FakeAgent(s, lambda attempt, s=s: script(s, attempt))))
    return out
