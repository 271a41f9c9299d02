"""`RemoteCluster`: the verbs of a cluster whose controller is a VM, from the user's machine,
over a real channel (HTTPS, pinned certificate, token) to a fake controller API. No Ray: what the
controller does with a request is `controller/daemon/channel_service.py`'s, tested end to end in
tests/end_to_end/test_laptop.py."""

from __future__ import annotations

import io
import socket
import socketserver
import subprocess
import sys
import threading
import zipfile

import pytest

from podmanager.channel import identity, records
from podmanager.channel.cluster_status import ClusterStatus, ServiceEndpoint
from podmanager.channel.run_status import RunStatus
from podmanager.channel.server import ChannelServer
from podmanager.channel.service_summary import ReplicaState, ServiceSummary
from podmanager.client import pinned
from podmanager.client.forward import Forward
from podmanager.client.remote import RemoteCluster
from podmanager.core.errors import PodmanagerError, SpecError
from podmanager.core.records import HostRef
from podmanager.core.run_results import RunResult
from podmanager.core.workload import Workload

CLUSTER = "lap"
SERVICE = "model-svc-1"


def record(status: str = "running", result: RunResult | None = None) -> RunStatus:
    return RunStatus(run_id="r1", cluster=CLUSTER, workload=Workload(entrypoint="train.py", working_dir="."),
                     slices=[0], budgets={}, checkpoint_dir=None, status=status, result=result)


class FakeController:
    """The controller's side: keeps the code it is sent, and plays a run's output in steps."""

    def __init__(self) -> None:
        self.code: dict[str, bytes] = {}
        self.submitted: list[records.SubmitRequest] = []
        self.watched: list[records.WatchRequest] = []
        self.cancelled = threading.Event()
        self.steps = 0
        self.jobs = 0
        self.served: list[records.ServeRequest] = []
        self.service_reads = 0
        self.service_cancelled = False
        self.slices = 1  # replica i > 0 is listed from read 2i + 1 on, once the one before is ready

    def keep_code(self, zipped: bytes) -> records.CodeReply:
        self.code["d1"] = zipped
        return records.CodeReply(digest="d1")

    def submit(self, request: records.SubmitRequest) -> records.RunReply:
        if request.workload.entrypoint == "missing_here.py":
            raise SpecError("run: the controller refused it", hint="a fix")
        self.submitted.append(request)
        return records.RunReply(run=record())

    def run(self, request: records.RunRequest) -> records.RunReply:
        return records.RunReply(run=record("cancelled" if self.cancelled.is_set() else "running"))

    def watch(self, request: records.WatchRequest) -> records.WatchReply:
        self.watched.append(request)
        self.steps += 1
        done = self.steps >= 3 or self.cancelled.is_set()
        result = RunResult.without_attempts("r1", CLUSTER, "succeeded", "run r1 succeeded") if done else None
        offset = request.offsets.get("slice-0/host-0", 0)
        line = f"line {offset}\n"
        return records.WatchReply(
            run=record("succeeded" if done else "running", result),
            events=[records.EventRecord(id=request.after_event + 1, time=1.0, kind="attempt_started", slice_index=None,
                                        message=f"event after {request.after_event}")],
            output=[records.HostOutput(host="slice-0/host-0", slice_index=0, worker_id=0, text=line,
                                       offset=offset + len(line))])

    def cancel(self, request: records.RunRequest) -> records.RunReply:
        self.cancelled.set()
        return records.RunReply(run=record("cancelled"))

    def runs(self, request: records.StatusRequest) -> records.RunsReply:
        return records.RunsReply(runs=[record()])

    def start_up(self, request: records.UpRequest) -> records.JobReply:
        return records.JobReply(job_id="up-1", verb="up", started_at=0.0)

    def job(self, request: records.JobRequest) -> records.JobReply:
        job_id = request.job_id
        self.jobs += 1
        if self.jobs < 2:
            return records.JobReply(job_id=job_id, verb="up", plan=records.PlanReply(cluster=CLUSTER, summary="create 1"))
        return records.JobReply(job_id=job_id, verb="up", done=True,
                                error=records.ErrorReply(message="up failed there", hint="its fix", exit_code=1))

    def events(self, request: records.EventsRequest) -> records.EventsReply:
        return records.EventsReply(events=[])

    def serve(self, request: records.ServeRequest) -> records.ServiceReply:
        self.served.append(request)
        return records.ServiceReply(service=self.service_summary())

    def service(self, request: records.ServiceRequest) -> records.ServiceReply:
        if request.service_id != SERVICE:
            raise SpecError(f"SERVICE: no service {request.service_id!r}", hint="See them all with 'podmanager runs'.")
        self.service_reads += 1
        return records.ServiceReply(service=self.service_summary())

    def cancel_service(self, request: records.ServiceRequest) -> records.ServiceReply:
        self.service_cancelled = True
        return records.ServiceReply(service=self.service_summary())

    def services(self, request: records.StatusRequest) -> records.ServicesReply:
        return records.ServicesReply(services=[self.service_summary()] if self.served else [])

    def service_summary(self) -> ServiceSummary:
        """Each replica starting, then ready from the next read; cancelled once asked."""
        listed = [i for i in range(self.slices) if i == 0 or self.service_reads > 2 * i]
        return ServiceSummary(
            run_id=SERVICE, cluster=CLUSTER, status="cancelled" if self.service_cancelled else "serving", message="",
            program="model.py", endpoint="http://127.0.0.1:1", requests=0, served=0, failures=0, rejected=0,
            p50_ms=None, p99_ms=None, goodput=None, started=1.0, slices=self.slices,
            replicas=[ReplicaState(replica=i, run_id=f"r{i + 1}", attempt=1, served=None,
                                           state="ready" if self.service_reads >= 2 * i + 2 else "starting")
                      for i in listed])

    def status(self, request: records.StatusRequest) -> ClusterStatus:
        return ClusterStatus(name=CLUSTER, backend="simulated", project="demo", slices=[], services=[
            ServiceEndpoint(service_id=SERVICE, endpoint="http://127.0.0.1:1", slices=[0])])

    def forward_target(self, cluster: str, target: str) -> tuple[str, int]:
        if target not in (records.DASHBOARD, SERVICE):
            raise SpecError(f"--service: no service {target!r}")
        return "127.0.0.1", self.echo_port


@pytest.fixture
def remote():
    fake = FakeController()
    echo = socketserver.TCPServer(("127.0.0.1", 0), Echo)  # what the dashboard stands for
    threading.Thread(target=echo.serve_forever, daemon=True).start()
    fake.echo_port = echo.server_address[1]
    made = identity.load_or_create(CLUSTER, "127.0.0.1")
    with ChannelServer(fake, made) as server:  # type: ignore[arg-type]
        pinned.install(CLUSTER, pinned.ControllerAddress(host=server.host, port=server.port), made.cert_pem(),
                       made.token())
        with RemoteCluster(CLUSTER) as cluster:
            yield cluster, fake
    echo.shutdown()
    echo.server_close()


class Echo(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        while line := self.rfile.readline():
            self.wfile.write(b"echo " + line)


def test_a_forward_carries_a_local_connection_to_the_controllers_side(remote) -> None:
    cluster, _ = remote
    with Forward(pinned.load(CLUSTER), records.DASHBOARD) as forward:
        with socket.create_connection(("127.0.0.1", forward.port), timeout=10) as connection:
            for text in (b"one\n", b"two\n" * 2000):  # small and larger than one read
                connection.sendall(text)
                wanted = b"".join(b"echo " + line + b"\n" for line in text.split(b"\n")[:-1])
                got = b""
                while len(got) < len(wanted):
                    got += connection.recv(1 << 16)
                assert got == wanted
    credentials = pinned.load(CLUSTER)
    stolen = pinned.ClientCredentials(CLUSTER, credentials.address, credentials.cert_pem, "not-the-token",
                                      credentials.folder)
    with Forward(stolen, records.DASHBOARD) as forward:  # a wrong token: the connection is closed, nothing echoes
        with socket.create_connection(("127.0.0.1", forward.port), timeout=10) as connection:
            connection.sendall(b"one\n")
            assert connection.recv(100) == b""


def test_a_run_ships_this_folders_code_and_follows_its_output_and_events(remote, tmp_path, monkeypatch) -> None:
    """Also: the podmanager home, here inside the folder (the test's), is not shipped: its token stays."""
    cluster, fake = remote
    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "big.bin").write_bytes(b"x" * 1000)
    (tmp_path / ".gitignore").write_text("data/\n")
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "pyvenv.cfg").write_text("")
    (tmp_path / "requirements.txt").write_text("numpy\n")
    monkeypatch.chdir(tmp_path)  # a user's folder, outside the repository
    printed: list[tuple[HostRef, str]] = []
    seen: list[str] = []
    result = cluster.run(Workload(entrypoint="train.py", requirements="requirements.txt"),
                         printer=lambda host, text: printed.append((host, text)), on_event=lambda e: seen.append(e.message))
    assert result.status == "succeeded"
    shipped = zipfile.ZipFile(io.BytesIO(fake.code["d1"])).namelist()
    assert sorted(shipped) == [".gitignore", "requirements.txt", "train.py"]  # no ignored data, no environment
    sent = fake.submitted[0]
    assert sent.code == "d1" and sent.workload.working_dir == "." and sent.workload.requirements == ["numpy"]
    # Each read starts where the last one ended: every line once, in order.
    assert [text for _, text in printed] == ["line 0\n", "line 7\n", "line 14\n"]
    assert [w.after_event for w in fake.watched] == [0, 1, 2] and seen == ["event after 0", "event after 1",
                                                                             "event after 2"]


def test_a_program_missing_here_is_refused_before_anything_is_sent(remote, tmp_path, monkeypatch) -> None:
    cluster, fake = remote
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecError, match="train.py is not a file in the working dir"):
        cluster.submit(Workload(entrypoint="train.py"))
    assert fake.code == {} and fake.submitted == []


def test_the_controllers_refusal_reaches_the_user_with_its_exit_code(remote, tmp_path, monkeypatch) -> None:
    cluster, _ = remote
    (tmp_path / "missing_here.py").write_text("")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PodmanagerError) as refused:
        cluster.submit(Workload(entrypoint="missing_here.py"))
    assert (refused.value.message, refused.value.hint, refused.value.exit_code) == (
        "run: the controller refused it", "a fix", 2)


def test_cancel_waits_for_the_run_to_end(remote) -> None:
    cluster, fake = remote
    run = cluster.run_handle("r1").cancel(timeout_s=5)
    assert fake.cancelled.is_set() and run.status == "cancelled"


def test_a_job_on_the_controller_is_followed_and_its_error_raised_here(remote) -> None:
    cluster, _ = remote
    plans = []
    with pytest.raises(PodmanagerError) as failed:
        cluster.follow_job(cluster.client.start_up(records.UpRequest(cluster=CLUSTER, spec_yaml="x: 1", timeout_s=1)),
                           None, on_plan=plans.append)
    assert (failed.value.message, failed.value.hint) == ("up failed there", "its fix")
    assert [p.describe() for p in plans] == ["create 1"]


def test_the_remote_verbs_load_neither_ray_nor_jax() -> None:
    code = ("import sys, podmanager.client.remote, podmanager.client.controller_machine, podmanager.cli.run, "
            "podmanager.cli.runs, podmanager.cli.logs, podmanager.cli.connect\n"
            "print(sorted(m for m in ('ray', 'jax') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]", loaded


def test_a_follower_waits_for_a_controller_that_is_restarting(remote, monkeypatch) -> None:
    """A read that cannot reach the controller (it is rebooting) is tried again, the user told
    once; a controller that stays away is said after the wait."""
    from podmanager.channel.errors import ChannelError
    from podmanager.client import remote as remote_module

    cluster, _ = remote
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ChannelError("cannot reach the controller of lap at 127.0.0.1:1: refused")
        return "answer"

    monkeypatch.setattr(remote_module.time, "sleep", lambda s: None)
    told: list[str] = []
    assert remote_module.patiently(flaky, told.append) == "answer"
    assert len(calls) == 3 and len(told) == 1 and "waiting for the controller" in told[0]
    with pytest.raises(ChannelError):
        remote_module.patiently(lambda: (_ for _ in ()).throw(ChannelError("gone")), wait_s=0.0)


def test_an_up_interrupted_before_the_controller_served_is_removed_by_down(tmp_path, monkeypatch) -> None:
    """`up` keeps the pointer (the spec, the token) before it makes anything: `down -c NAME` of an
    up cut short knows the cluster's controller is a VM and removes whatever was made."""
    import json

    from podmanager.api.cluster_down import down
    from podmanager.emulator import launcher

    monkeypatch.setenv("PODMANAGER_SIM_HOME", str(tmp_path / "cloud"))
    spec = {"name": "cut", "backend": "simulated", "controller": {"local": False},
            "slices": [{"accelerator": "v4-8"}], "simulation": {"boot_hosts": False}}
    pinned.save_spec("cut", json.dumps(spec))
    pinned.save_token("cut", "t0ken")
    said = []
    try:
        report = down("cut", on_event=lambda event: said.append(event.message))
    finally:
        launcher.stop_all()
    assert report.name == "cut" and not pinned.folder("cut").exists()
    assert any("deleting the slices by their label" in message for message in said)


def test_run_with_down_on_exit_downs_the_remote_cluster_at_the_end(remote, tmp_path, monkeypatch) -> None:
    from podmanager.client import remote as remote_module

    cluster, _ = remote
    (tmp_path / "train.py").write_text("")
    monkeypatch.chdir(tmp_path)
    downed: list[str] = []
    monkeypatch.setattr(remote_module, "down_remote", lambda name, **_: downed.append(name))
    assert cluster.run(Workload(entrypoint="train.py"), down_on_exit=True).status == "succeeded"
    assert downed == [CLUSTER]


def test_serve_ships_the_code_and_its_endpoint_is_a_forward_to_the_controllers_router(
        remote, tmp_path, monkeypatch) -> None:
    from podmanager.api.serve import ServeOptions

    cluster, fake = remote
    (tmp_path / "model.py").write_text("print('serving')\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecError, match="--host 0.0.0.0"):  # bad input: nothing sent
        cluster.serve(Workload.from_argv(["model.py"]), ServeOptions(host="0.0.0.0"))
    assert fake.served == [] and fake.code == {}

    handle = cluster.serve(Workload.from_argv(["model.py"]), ServeOptions(replicas=1, queue_timeout_s=5.0))
    [request] = fake.served
    assert (request.replicas, request.queue_timeout_s, request.code) == (1, 5.0, "d1")
    assert "model.py" in zipfile.ZipFile(io.BytesIO(fake.code["d1"])).namelist()
    assert [r.state for r in handle.wait_ready(timeout_s=10)] == ["ready"]
    # Another slice, whose replica the controller lists only once the first is ready: waiting
    # for all waits for it too.
    fake.slices, fake.service_reads = 2, 0
    assert [r.state for r in handle.wait_ready(timeout_s=10)] == ["ready", "ready"]
    fake.slices = 1
    assert cluster.has_service(SERVICE) and not cluster.has_service("other")

    with handle.reachable() as endpoint:  # the router's stand-in echoes through the channel
        host, port = endpoint.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as connection:
            connection.sendall(b"predict\n")
            assert connection.recv(100) == b"echo predict\n"
    assert handle.endpoint is None and "podmanager dashboard -c lap --service model-svc-1" in handle.reach

    with pytest.raises(PodmanagerError, match="no service 'nope'"):
        cluster.service_handle("nope")
    assert cluster.cancel_service(SERVICE).status == "cancelled"
    assert handle.follow(lambda summary: None, every_s=0.01)["status"] == "cancelled"


class JobController(FakeController):
    """A controller whose `up` and `down` jobs succeed at once, remembering what it was asked."""

    def __init__(self) -> None:
        super().__init__()
        self.ups: list[records.UpRequest] = []
        self.downs: list[str] = []

    def start_up(self, request: records.UpRequest) -> records.JobReply:
        self.ups.append(request)
        return records.JobReply(job_id="up-1", verb="up", started_at=0.0)

    def start_down(self, request: records.DownRequest) -> records.JobReply:
        self.downs.append(request.cluster)
        return records.JobReply(job_id="down-1", verb="down", started_at=0.0)

    def job(self, request: records.JobRequest) -> records.JobReply:
        job_id = request.job_id
        verb = job_id.split("-")[0]
        return records.JobReply(job_id=job_id, verb=verb, done=True,
                                status=self.status(records.StatusRequest(cluster=CLUSTER)) if verb == "up" else None)

    def status(self, request: records.StatusRequest) -> ClusterStatus:
        return ClusterStatus(name=request.cluster, backend="simulated", project="podmanager-sim", slices=[])


VM_SPEC = {"name": CLUSTER, "controller": {"local": False}, "slices": [{"accelerator": "v4-8"}]}


@pytest.fixture
def vm_controller(monkeypatch):
    """A controller VM that `up` "makes" by pinning the fake controller's channel; `tear_down`
    remembered. Any `up` of the cluster on this machine fails the test."""
    from podmanager.api import cluster as cluster_module
    from podmanager.client.controller_machine import ControllerMachine

    fake, torn = JobController(), []
    made = identity.load_or_create(CLUSTER, "127.0.0.1")
    with ChannelServer(fake, made) as server:  # type: ignore[arg-type]
        def bring_up(machine: ControllerMachine, *, timeout_s: float, plan: object = None) -> pinned.ClientCredentials:
            return pinned.install(CLUSTER, pinned.ControllerAddress(host=server.host, port=server.port),
                                  made.cert_pem(), made.token())

        monkeypatch.setattr(ControllerMachine, "plan", lambda machine: None)  # the VM "there" is as the spec says
        monkeypatch.setattr(ControllerMachine, "bring_up", bring_up)
        monkeypatch.setattr(ControllerMachine, "tear_down", lambda machine, **_: torn.append(machine.spec.name))
        monkeypatch.setattr(cluster_module, "bring_up",
                            lambda *args, **kwargs: pytest.fail("up ran a controller on this machine"))
        yield fake, torn


def test_a_scripts_cluster_of_a_controller_vm_spec_goes_through_the_controller(vm_controller, tmp_path,
                                                                                monkeypatch) -> None:
    """`Cluster.from_yaml` of a `controller.local: false` spec: up, status, run and the context
    manager's down all reach the controller VM, as the CLI's verbs do; nothing of the cluster is
    recorded or started on this machine."""
    import yaml

    from podmanager.api import Cluster
    from podmanager.controller import head
    from podmanager.state import StateStore

    fake, torn = vm_controller
    spec = tmp_path / "vm.yaml"
    spec.write_text(yaml.safe_dump(VM_SPEC))
    (tmp_path / "train.py").write_text("")
    monkeypatch.chdir(tmp_path)
    heard: list[str] = []
    with Cluster.from_yaml(spec, dry_run=True, down_on_exit=True, on_event=lambda e: heard.append(e.message)) as cluster:
        assert cluster.up(timeout_s=60).name == CLUSTER
        assert cluster.status().project == "podmanager-sim"
        assert cluster.run(Workload(entrypoint="train.py")).status == "succeeded"
        assert fake.downs == [] and torn == []
    [up] = fake.ups
    # The dry run, as the CLI sends it, naming the VMs' own account that the laptop's `up` made.
    assert yaml.safe_load(up.spec_yaml) == {**VM_SPEC, "backend": "simulated", "network": {
        "service_account": f"pm-{CLUSTER}-vms@podmanager-sim.iam.gserviceaccount.com"}}
    assert fake.submitted and fake.downs == [CLUSTER] and torn == [CLUSTER]  # down: the controller's, then its VM
    assert "event after 0" in heard  # the object's listener hears the run's events
    assert StateStore().get_cluster(CLUSTER) is None and head.load_state(CLUSTER) is None


def test_every_way_a_script_names_a_controller_vm_cluster_reaches_it_or_is_refused(vm_controller) -> None:
    from podmanager.api import Cluster
    from podmanager.client.remote_up_down import RemoteSpec
    from podmanager.core.spec import parse_spec

    fake, _ = vm_controller
    remote = Cluster.from_dict(VM_SPEC, dry_run=True)
    assert isinstance(remote, RemoteSpec) and remote.raw["backend"] == "simulated"
    remote.up(timeout_s=60)
    assert len(fake.ups) == 1
    by_name = Cluster.from_name(CLUSTER)  # the pointer `up` kept, no record here
    assert isinstance(by_name, RemoteCluster) and by_name.status().name == CLUSTER
    by_name.close()
    with pytest.raises(SpecError, match="controller.local: false") as direct:
        Cluster(parse_spec(VM_SPEC, dry_run=True))
    assert direct.value.exit_code == 2 and "Cluster.from_yaml" in (direct.value.hint or "")
    with pytest.raises(SpecError, match="^store: ") as given:  # the controller's own: refused, not ignored
        Cluster.from_dict(VM_SPEC, dry_run=True, store=object())
    assert given.value.exit_code == 2


def test_a_service_is_shown_with_how_to_reach_it_from_here_not_the_controllers_loopback(remote) -> None:
    """The router listens on the controller VM's loopback: that address means nothing here."""
    from typer.testing import CliRunner

    from podmanager.api import service_history
    from podmanager.cli import app

    cluster, fake = remote
    fake.served.append(records.ServeRequest(cluster=CLUSTER, workload=Workload(entrypoint="model.py")))
    how = f"podmanager dashboard -c {CLUSTER} --service {SERVICE}"
    [shown] = cluster.status().services
    assert how in shown.endpoint and "127.0.0.1" not in shown.endpoint
    [listed] = service_history(CLUSTER)
    assert how in listed["endpoint"] and "127.0.0.1" not in listed["endpoint"]
    for verb in ("status", "runs"):
        result = CliRunner().invoke(app, [verb, "-c", CLUSTER], prog_name="podmanager")
        assert result.exit_code == 0, result.output
        assert how in result.output and "127.0.0.1" not in result.output


def test_a_forward_to_a_service_the_cluster_does_not_serve_is_refused_naming_the_flag(remote) -> None:
    from typer.testing import CliRunner

    from podmanager.cli import app

    refused = CliRunner().invoke(app, ["dashboard", "-c", CLUSTER, "--service", "nope"], prog_name="podmanager")
    assert refused.exit_code == 2
    assert "--service nope" in refused.output and f"'podmanager runs -c {CLUSTER}' lists its services" in refused.output


def test_connect_to_a_cluster_the_cloud_does_not_hold_leaves_no_emulator_running() -> None:
    """`connect` starts the project's emulator to look; finding nothing, it leaves none behind
    (issue 43, 3: idle emulators after the lost home's `connect`)."""
    from podmanager.client.controller_machine import connect
    from podmanager.core.errors import ClusterNotFoundError
    from podmanager.emulator import launcher

    with pytest.raises(ClusterNotFoundError):
        connect("nothing", project=None, dry_run=True)
    assert launcher.running("podmanager-sim") is None
