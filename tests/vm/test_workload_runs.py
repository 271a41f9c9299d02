"""A host's workload processes, without Ray: start, output, exit, progress, stop."""

import io
import os
import signal
import subprocess
import sys
import textwrap
import time
import zipfile

import psutil
import pytest

from podmanager.core.clock import poll_until
from podmanager.core.workload import Workload
from podmanager.runtime.contract import ProgressRecord
from podmanager.vm.host_wire import HostLaunch, RunSetup
from podmanager.vm.procs import MACHINE_ENV, OWNER_ENV
from podmanager.vm.workload_runs import HostRuns


def wait_exit(runs, run_id, timeout=30):
    runs.processes[run_id].wait(timeout)
    return runs.poll(run_id, 0)


def command(code):
    return Workload(command=[sys.executable, "-c", code], working_dir=None)


def launch(run_id, workload, env, attempt=0):
    return HostLaunch(run=RunSetup(run_id=run_id, workload=workload), attempt=attempt, env=env)


def test_output_exit_code_and_environment(tmp_path):
    runs = HostRuns(tmp_path)
    code = ("import os,sys; print('rank', os.environ['JAX_PROCESS_ID']); "
            "print('token' , os.environ.get('RAY_AUTH_TOKEN')); sys.stdout.write('no newline'); sys.exit(3)")
    os.environ["RAY_AUTH_TOKEN"] = "secret"
    try:
        runs.start(launch("r", command(code), {"JAX_PROCESS_ID": "5"}))
    finally:
        del os.environ["RAY_AUTH_TOKEN"]
    report = wait_exit(runs, "r")
    assert report.running is False and report.exit_code == 3
    assert report.output == b"rank 5\ntoken None\nno newline"  # the agent's secrets are not inherited


def test_an_agent_started_again_reads_an_earlier_agents_attempt_output_from_its_file(tmp_path):
    earlier = HostRuns(tmp_path)
    earlier.start(launch("r", command("print('one'); print('two'); print('three', end='')"), {}, attempt=2))
    wait_exit(earlier, "r")
    again = HostRuns(tmp_path)  # the agent after a lost head: it holds no process of the run
    assert again.left_output("r", 2, 4) == b"two\nthree"  # from the offset on, the unterminated end too
    assert again.left_output("r", 2, 13) == b""
    assert again.left_output("r", 1, 0) == b"" and again.left_output("other", 2, 0) == b""
    with pytest.raises(LookupError, match="holds no process of run r: it started afresh"):
        again.poll("r", 0)  # said as the reason the host is lost, not a bare KeyError


def test_progress_is_reported(tmp_path):
    runs = HostRuns(tmp_path)
    code = ("import json,os\nwith open(os.environ['PODMANAGER_PROGRESS_FILE'],'a') as f:\n"
            "  [f.write(json.dumps({'step': s, 'time': 100 + s, 'loss': 10 - s}) + '\\n') for s in range(4)]")
    runs.start(launch("r", command(code), {}))
    report = wait_exit(runs, "r")
    assert report.exit_code == 0
    assert report.first_progress == ProgressRecord(0, 100.0, loss=10.0)
    assert report.progress == ProgressRecord(3, 103.0, loss=7.0)


def test_working_dir_is_unpacked_and_importable(tmp_path):
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("helper_mod.py", "VALUE = 42\n")
        z.writestr("main.py", "import helper_mod; print(helper_mod.VALUE)\n")
    runs = HostRuns(tmp_path)
    workload = Workload(entrypoint="main.py")
    assert runs.setup(RunSetup(run_id="r", workload=workload), archive.getvalue()).ok
    runs.start(launch("r", workload, {}))
    assert wait_exit(runs, "r").output == b"42\n"


def test_stop_terminates_the_whole_process_group(tmp_path):
    runs = HostRuns(tmp_path)
    code = ("import subprocess,sys,time; subprocess.Popen([sys.executable,'-c','import time; time.sleep(600)']); "
            "print('ready', flush=True); time.sleep(600)")
    pid = runs.start(launch("r", command(code), {}))
    while b"ready" not in runs.poll("r", 0).output:
        runs.processes["r"].wait(0.05)
    children = psutil.Process(pid).children(recursive=True)
    assert children
    assert runs.stop("r", grace_s=5) == -signal.SIGTERM
    # The signal is delivered at once but a loaded machine may take a moment to end them.
    _, alive = psutil.wait_procs(children, timeout=10)
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in alive)


def test_stop_escalates_to_sigkill_when_sigterm_is_ignored(tmp_path):
    runs = HostRuns(tmp_path)
    code = "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(600)"
    runs.start(launch("r", command(code), {}))
    while b"ready" not in runs.poll("r", 0).output:
        runs.processes["r"].wait(0.05)
    assert runs.stop("r", grace_s=0.5) == -signal.SIGKILL


def test_a_program_already_told_to_stop_gets_no_second_sigterm_while_it_exits(tmp_path):
    """A notice's SIGTERM, then the attempt's stop: the program is already on its way out (at
    the interpreter's exit Python's handlers are gone), so a second SIGTERM would kill it."""
    runs = HostRuns(tmp_path)
    code = textwrap.dedent("""
        import signal, sys, time
        def checkpoint_and_exit(*_):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as at the interpreter's exit
            print("exiting", flush=True)
            time.sleep(0.5)
            sys.exit(75)
        signal.signal(signal.SIGTERM, checkpoint_and_exit)
        print("ready", flush=True)
        time.sleep(600)
    """)
    runs.start(launch("r", command(code), {}))
    poll_until(lambda: b"ready" in runs.poll("r", 0).output, timeout_s=30, interval_s=0.05)
    runs.signal("r", signal.SIGTERM)
    poll_until(lambda: b"exiting" in runs.poll("r", 0).output, timeout_s=30, interval_s=0.01)
    assert runs.stop("r", grace_s=30) == 75


def test_the_poll_says_whether_the_agent_asked_the_program_to_stop(tmp_path):
    """A program that checkpoints on SIGTERM and exits 0 (JAX's examples do): its exit looks like
    a finished one, and only the poll's word that it was asked to stop tells them apart."""
    runs = HostRuns(tmp_path)
    code = textwrap.dedent("""
        import signal, sys, time
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        print("ready", flush=True)
        time.sleep(600)
    """)
    runs.start(launch("r", command(code), {}))
    poll_until(lambda: b"ready" in runs.poll("r", 0).output, timeout_s=30, interval_s=0.05)
    assert runs.poll("r", 0).asked_to_stop is False
    runs.signal("r", signal.SIGTERM)
    report = wait_exit(runs, "r")
    assert (report.exit_code, report.asked_to_stop) == (0, True)
    runs.start(launch("finished", command("print('done')"), {}))
    assert wait_exit(runs, "finished").asked_to_stop is False


def test_a_second_start_of_a_live_run_is_refused(tmp_path):
    runs = HostRuns(tmp_path)
    runs.start(launch("r", command("import time; time.sleep(600)"), {}))
    try:
        with pytest.raises(RuntimeError, match="already has a live process"):
            runs.start(launch("r", command("print(1)"), {}))
    finally:
        runs.stop_all(grace_s=1)


def test_the_program_does_not_inherit_the_agents_niceness(tmp_path):
    """Ray runs its workers at nice 15; a program started by one must run at normal priority."""
    if os.geteuid() != 0:
        pytest.skip("lowering a niceness needs root, as on a TPU VM")
    script = textwrap.dedent(f"""
        import os, sys
        os.nice(15)
        from podmanager.vm.host_wire import HostLaunch, RunSetup
        from podmanager.vm.workload_runs import HostRuns
        from podmanager.core.workload import Workload
        runs = HostRuns(__import__("pathlib").Path({str(tmp_path)!r}))
        code = "import os; print(os.nice(0))"
        workload = Workload(command=[sys.executable, "-c", code], working_dir=None)
        runs.start(HostLaunch(run=RunSetup(run_id="r", workload=workload), attempt=0))
        runs.processes["r"].wait(30)
        print(runs.poll("r", 0).output.decode().strip())
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "0"


def test_a_held_poll_answers_as_soon_as_the_process_exits(tmp_path):
    runs = HostRuns(tmp_path)
    runs.start(launch("r", command("import time; time.sleep(0.3); print('bye')"), {}))
    started = time.monotonic()
    report = runs.poll("r", 0, hold_s=120)
    assert report.running is False and report.exit_code == 0 and report.output == b"bye\n"
    assert time.monotonic() - started < 60  # answered at the exit, not at the end of the hold


def test_a_held_poll_of_a_running_process_answers_after_the_hold(tmp_path):
    runs = HostRuns(tmp_path)
    runs.start(launch("r", command("import time; print('up', flush=True); time.sleep(120)"), {}))
    try:
        started = time.monotonic()
        report = runs.poll("r", 0, hold_s=0.5)
        assert report.running is True and report.exit_code is None
        assert time.monotonic() - started >= 0.5
    finally:
        assert runs.stop("r", grace_s=5) is not None
    assert runs.poll("r", 0).running is False


def test_the_simulated_host_tags_are_inherited_but_not_other_podmanager_settings(tmp_path, monkeypatch):
    monkeypatch.setenv(MACHINE_ENV, "host-tag")
    monkeypatch.setenv(OWNER_ENV, "c@home")
    monkeypatch.setenv("PODMANAGER_RUN_ID", "an-earlier-run")
    runs = HostRuns(tmp_path)
    code = (f"import os; print(os.environ.get('{MACHINE_ENV}'), os.environ.get('{OWNER_ENV}'), "
            "os.environ.get('PODMANAGER_RUN_ID'))")
    runs.start(launch("r", command(code), {}))
    # The program dies with its simulated host, and `down` finds it by its owner even once its
    # agent is gone (and it with no tagged parent left).
    assert wait_exit(runs, "r").output == b"host-tag c@home None\n"


def test_a_program_keeps_what_xla_compiled_in_its_hosts_cache_unless_the_run_names_another(tmp_path):
    runs = HostRuns(tmp_path / "host", compile_cache=tmp_path / "jax-cache")
    code = "import os; print(os.environ.get('JAX_COMPILATION_CACHE_DIR'))"
    runs.start(launch("r", command(code), {}))
    assert wait_exit(runs, "r").output == f"{tmp_path / 'jax-cache'}\n".encode()  # every launch on the host: one cache
    own = Workload(command=[sys.executable, "-c", code], working_dir=None, env={"JAX_COMPILATION_CACHE_DIR": "/mine"})
    runs.start(launch("mine", own, {}))
    assert wait_exit(runs, "mine").output == b"/mine\n"  # --env wins
    bare = HostRuns(tmp_path / "bare")  # no cache given: none set (the agent's own JAX_* never passes)
    bare.start(launch("r", command(code), {}))
    assert wait_exit(bare, "r").output == b"None\n"


def test_setup_finds_a_missing_module_or_command_on_the_host_before_anything_starts(tmp_path):
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("pkg/__init__.py", "raise SystemExit('the check must not import the package')\n")
        z.writestr("pkg/main.py", "print('main')\n")
    runs = HostRuns(tmp_path)
    found = Workload(entrypoint="-m pkg.main")
    assert runs.setup(RunSetup(run_id="a", workload=found), archive.getvalue()).ok
    missing = runs.setup(RunSetup(run_id="b", workload=Workload(entrypoint="-m pkg.nope")), archive.getvalue())
    assert not missing.ok and "module 'pkg.nope'" in missing.error
    typo = runs.setup(RunSetup(run_id="c", workload=Workload(command=["pythn", "x.py"], working_dir=None)), None)
    assert not typo.ok and "'pythn' is not on the host's PATH" in typo.error
    # `python` is the run's environment's interpreter, first on PATH
    assert runs.setup(RunSetup(run_id="d", workload=Workload(command=["python", "x.py"], working_dir=None)), None).ok
    assert runs.processes == {}


def test_a_second_setup_of_a_run_on_the_same_host_is_free(tmp_path):
    runs = HostRuns(tmp_path)
    workload = command("print(1)")
    first = runs.setup(RunSetup(run_id="r", workload=workload), None)
    again = runs.setup(RunSetup(run_id="r", workload=workload), None)
    assert first.ok and again.ok and again.reused
    assert not first.already and again.already  # (a hot spare set up ahead answers so at the swap's relaunch)


# Starts a plain child and, from it, a grandchild in a session of its own (out of the program's
# process group, as `setsid` or a daemon does), prints both pids and the sessions of the program and
# the grandchild, then exits 0 or sleeps.
LEAVES_CHILDREN = textwrap.dedent("""
    import os, subprocess, sys, time
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    child = subprocess.Popen([sys.executable, "-c",
        "import os, subprocess, sys, time; g = subprocess.Popen(sys.argv[1:], start_new_session=True);"
        " print(g.pid, os.getsid(g.pid), flush=True); time.sleep(600)", *sleeper], stdout=subprocess.PIPE, text=True)
    grandchild, its_session = child.stdout.readline().split()
    print("pids", child.pid, grandchild, os.getsid(0), its_session, flush=True)
    if sys.argv[1] == "wait":
        time.sleep(600)
""")


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("ending", ["exit 0", "stop"])
def test_an_attempt_leaves_no_child_of_the_program_behind_not_even_one_in_its_own_session(tmp_path, ending):
    """On a TPU VM a leftover child holds the chips the next run needs."""
    runs = HostRuns(tmp_path)
    workload = Workload(command=[sys.executable, "-c", LEAVES_CHILDREN, "wait" if ending == "stop" else "exit"],
                        working_dir=None)
    runs.start(launch("r", workload, {}))
    output = poll_until(lambda: (out := runs.poll("r", 0).output) and b"\n" in out and out, timeout_s=60,
                        interval_s=0.05, what="the program to print its children's pids")
    child, grandchild, session, its_session = (int(p) for p in output.split()[1:5])
    try:
        assert its_session != session  # the grandchild left the program's session (and group)
        if ending == "stop":
            runs.stop("r", grace_s=5)
        else:
            runs.processes["r"].wait(60)
            assert runs.poll("r", 0).exit_code == 0
        poll_until(lambda: not _alive(child) and not _alive(grandchild), timeout_s=10, interval_s=0.05,
                   what="the program's child and grandchild to end")
    finally:
        for leftover in (child, grandchild):
            if _alive(leftover):
                os.kill(leftover, signal.SIGKILL)
