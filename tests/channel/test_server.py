"""podmanager/channel: a client reaches a controller over HTTPS, pinned to the controller's own
certificate and carrying the cluster's token; anything else is refused with the fix named.
No Ray: the controller's API is a fake served in-process."""

from __future__ import annotations

import stat
import subprocess
import sys
import threading

import pytest

from podmanager.channel import identity, records
from podmanager.channel.cluster_status import (
    ClusterStatus,
    HostStatus,
    ServiceEndpoint,
    SliceStatus,
)
from podmanager.channel.errors import ChannelCredentialError, ChannelError, RemoteError
from podmanager.channel.private_files import write_private
from podmanager.channel.server import ChannelServer
from podmanager.channel.verbs import ChannelVerbs
from podmanager.client import pinned
from podmanager.client.channel_client import ChannelClient
from podmanager.core import peer
from podmanager.core.errors import ClusterNotFoundError

CLUSTER = "c1"

STATUS = ClusterStatus(
    name=CLUSTER, backend="simulated", project="demo",
    slices=[SliceStatus(index=0, name="c1-s0", accelerator="v4-8", zone="us-central2-b", state="READY",
                               hosts=1, chips=4, boot=["joined"]),
            SliceStatus(index=1, name="c1-s1", accelerator="v4-8", zone=None, state="MISSING", hosts=1,
                               chips=4, spare=True)],
    hosts=[HostStatus(slice_index=0, node_name="c1-s0", worker_id=0, ip="10.0.0.2", chips=4, healthy=True,
                             last_heartbeat=1700000000.5, ray_node_id="abc", detail="ok", state="healthy",
                             boot="joined", versions={"ray": "2.50.0"})],
    hosts_observed_at=1700000001.0,
    services=[ServiceEndpoint(service_id="svc-1", endpoint="http://10.0.0.1:9000", slices=[0])],
    slices_observed_at=1700000002.0, head_problem=None)


class FakeApi:
    """The controller's API as the channel sees it: answers and remembers what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str, int | None]] = []
        self._lock = threading.Lock()

    def status(self, request: records.StatusRequest) -> ClusterStatus:
        cluster = request.cluster
        with self._lock:
            self.asked.append(("status", cluster, None))
        if cluster != CLUSTER:
            raise ClusterNotFoundError(f"--cluster: no cluster named {cluster!r} (known: {CLUSTER})",
                                       hint="Check the name.")
        return STATUS

    def events(self, request: records.EventsRequest) -> records.EventsReply:
        cluster, after_id = request.cluster, request.after_id
        with self._lock:
            self.asked.append(("events", cluster, after_id))
        return records.EventsReply(events=[
            records.EventRecord(id=after_id + 1, time=1.5, kind="slice_ready", slice_index=0, message="ready",
                                data={"run_id": "r1", "zones": ["a", "b"], "attempt": 2})])

    def start_down(self, request: records.DownRequest) -> records.JobReply:
        with self._lock:
            self.asked.append(("down", request.cluster, None))
        return records.JobReply(job_id="down-1", verb="down")


@pytest.fixture
def api() -> FakeApi:
    return FakeApi()


@pytest.fixture
def controller(api):
    """A dry run's controller: its identity made for loopback, serving the fake API."""
    made = identity.load_or_create(CLUSTER, identity.controller_address(simulated=True))
    with ChannelServer(api, made) as server:
        yield made, server


def install(made: identity.ControllerIdentity, server: ChannelServer, *, cert_pem: str | None = None,
            token: str | None = None) -> pinned.ClientCredentials:
    return pinned.install(CLUSTER, pinned.ControllerAddress(host=server.host, port=server.port),
                          cert_pem or made.cert_pem(), token or made.token())


def test_status_and_events_round_trip_as_typed_records(controller, api) -> None:
    made, server = controller
    install(made, server)
    with ChannelClient.for_cluster(CLUSTER) as client:
        status = client.status(CLUSTER)
        events = client.events(CLUSTER, after_id=41)
    assert isinstance(status, ClusterStatus) and status == STATUS  # the very record the controller built
    assert isinstance(status.hosts[0], HostStatus) and status.hosts[0].versions == {"ray": "2.50.0"}
    assert [(e.id, e.kind, e.data) for e in events.events] == [
        (42, "slice_ready", {"run_id": "r1", "zones": ["a", "b"], "attempt": 2})]
    assert api.asked == [("status", CLUSTER, None), ("events", CLUSTER, 41)]


def test_a_wrong_or_missing_token_gets_401_and_the_client_names_the_fix(controller, api) -> None:
    made, server = controller
    credentials = install(made, server, token="not-the-token")
    with pytest.raises(ChannelCredentialError) as refused:
        ChannelClient(credentials).status(CLUSTER)
    error = refused.value
    assert error.exit_code == 2
    assert str(credentials.folder / pinned.TOKEN_FILE) in error.message and "not this cluster's" in error.message
    assert error.hint == pinned.refetch_hint(CLUSTER) and f"'podmanager connect -c {CLUSTER} " in error.hint
    assert "not-the-token" not in str(error) and made.token() not in str(error)  # no secret in an output

    # On the wire: a 401 asking for a bearer token, for a wrong token and for none.
    pool = ChannelClient(credentials)._pool
    for headers in ({"Authorization": "Bearer not-the-token"}, {"Authorization": f"Basic {made.token()}"}, {}):
        answer = pool.urlopen("POST", ChannelVerbs.status.path, body=b'{"cluster": "c1"}', headers=headers)
        assert answer.status == 401 and answer.headers["WWW-Authenticate"].startswith("Bearer")
        assert records.ErrorReply.model_validate_json(answer.data).exit_code == 2
    assert api.asked == []


def test_a_controller_presenting_another_certificate_is_refused_before_the_token_is_sent(controller, api) -> None:
    made, _ = controller
    impostor_api = FakeApi()
    impostor = identity.load_or_create("impostor", "127.0.0.1")
    write_private(impostor.token_path, made.token())  # it even expects the right token: it must never see it
    with ChannelServer(impostor_api, impostor) as other:
        credentials = pinned.install(CLUSTER, pinned.ControllerAddress(host="127.0.0.1", port=other.port),
                                     made.cert_pem(), made.token())
        with pytest.raises(ChannelCredentialError) as refused:
            ChannelClient(credentials).status(CLUSTER)
    assert impostor_api.asked == [] and api.asked == []
    assert "did not present the certificate pinned" in refused.value.message
    assert "the token was not sent" in refused.value.message and refused.value.exit_code == 2
    assert "new certificate" in (refused.value.hint or "")


def test_a_certificate_that_names_another_address_is_refused(controller) -> None:
    made, server = controller
    _, named_elsewhere = identity.self_signed(CLUSTER, "10.9.9.9")  # right pin, wrong name: a moved controller
    with pytest.raises(ChannelCredentialError):
        ChannelClient(install(made, server, cert_pem=named_elsewhere)).status(CLUSTER)


def test_missing_or_unsafe_credentials_are_clear_errors() -> None:
    with pytest.raises(ChannelCredentialError) as none:
        ChannelClient.for_cluster(CLUSTER)
    assert "holds no channel credentials" in none.value.message and none.value.exit_code == 2
    assert none.value.hint == pinned.refetch_hint(CLUSTER)

    made = identity.load_or_create(CLUSTER, "127.0.0.1")
    credentials = pinned.install(CLUSTER, pinned.ControllerAddress(host="127.0.0.1", port=1), made.cert_pem(),
                                 made.token())
    token_file = credentials.folder / pinned.TOKEN_FILE
    token_file.chmod(0o644)
    with pytest.raises(ChannelCredentialError) as loose:
        pinned.load(CLUSTER)
    assert str(token_file) in loose.value.message and "0644" in loose.value.message
    assert f"chmod 600 {token_file}" in (loose.value.hint or "")

    token_file.unlink()
    with pytest.raises(ChannelCredentialError) as missing:
        pinned.load(CLUSTER)
    assert f"the cluster's channel token: {token_file} does not exist" == missing.value.message
    assert missing.value.hint == pinned.refetch_hint(CLUSTER) and missing.value.exit_code == 2


def test_the_fix_for_lost_credentials_is_podmanager_connect_with_where_the_cluster_is() -> None:
    """Not copying files off the controller's disk: `connect` fetches them, and the hint names
    its flags as far as the spec this machine kept tells them."""
    assert pinned.refetch_hint(CLUSTER) == (f"'podmanager connect -c {CLUSTER} --project PROJECT (or --dry-run)' "
                                            "fetches them again (the controller's certificate and the cluster's token).")
    pinned.save_spec(CLUSTER, '{"name": "c1", "backend": "simulated"}')
    assert f"'podmanager connect -c {CLUSTER} --dry-run'" in pinned.refetch_hint(CLUSTER)
    pinned.save_spec(CLUSTER, '{"name": "c1", "project": "my-proj"}')
    assert f"'podmanager connect -c {CLUSTER} --project my-proj'" in pinned.refetch_hint(CLUSTER)
    pinned.save_spec(CLUSTER, "not json")
    assert "--project PROJECT (or --dry-run)" in pinned.refetch_hint(CLUSTER)
    with pytest.raises(ChannelCredentialError) as missing:  # the token gone, the spec kept
        pinned.load_token(CLUSTER)
    assert "podmanager connect" in (missing.value.hint or "") and "channel_server" not in (missing.value.hint or "")


def test_every_credential_file_is_owner_only_on_both_sides(controller) -> None:
    made, server = controller
    credentials = install(made, server)
    for folder, files in ((made.folder, (identity.KEY_FILE, identity.CERT_FILE, identity.TOKEN_FILE)),
                          (credentials.folder, (pinned.ADDRESS_FILE, pinned.CERT_FILE, pinned.TOKEN_FILE))):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
        assert sorted(p.name for p in folder.iterdir()) == sorted(files)  # no temporary left behind
        for name in files:
            assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600, folder / name


def test_the_controller_keeps_its_identity_and_names_its_address() -> None:
    first = identity.load_or_create(CLUSTER, "127.0.0.1")
    cert, token = first.cert_pem(), first.token()
    assert identity.names(cert, "127.0.0.1") and not identity.names(cert, "10.0.0.5")
    again = identity.load_or_create(CLUSTER, "127.0.0.1")  # a reboot: clients keep their pin and token
    assert (again.cert_pem(), again.token()) == (cert, token)

    moved = identity.load_or_create(CLUSTER, "controller.internal")
    assert moved.cert_pem() != cert and identity.names(moved.cert_pem(), "controller.internal")
    assert moved.token() == token


def test_a_dry_run_controller_listens_on_loopback_only(controller) -> None:
    _, server = controller
    assert identity.controller_address(simulated=True, vm_address="10.0.0.7") == "127.0.0.1"
    assert server.host == "127.0.0.1"
    with pytest.raises(ValueError, match="address"):
        identity.controller_address(simulated=False)
    assert identity.controller_address(simulated=False, vm_address="10.0.0.7") == "10.0.0.7"


def test_the_controllers_errors_reach_the_client_with_their_exit_code(controller, api) -> None:
    made, server = controller
    client = ChannelClient(install(made, server))
    with pytest.raises(RemoteError) as unknown:
        client.status("nope")
    assert unknown.value.message == "--cluster: no cluster named 'nope' (known: c1)"
    assert unknown.value.hint == "Check the name." and unknown.value.exit_code == 2

    answer = client._pool.urlopen("POST", ChannelVerbs.events.path, body=b'{"cluster": "c1", "after_id": -1}',
                                  headers={"Authorization": f"Bearer {made.token()}"})
    assert answer.status == 400
    refusal = records.ErrorReply.model_validate_json(answer.data)
    assert refusal.message.startswith("after_id:") and refusal.exit_code == 2
    assert api.asked == [("status", "nope", None)]


def test_a_number_no_field_can_take_is_a_400_naming_the_field_and_the_api_is_not_asked(controller, api) -> None:
    """JSON reads 1e400 as infinity and a 40-digit integer as such: neither reaches the API
    (SQLite's INTEGER is 64 bits; a timeout must be a number of seconds)."""
    made, server = controller
    client = ChannelClient(install(made, server))
    for path, body, field in [
            (ChannelVerbs.start_down.path, b'{"cluster": "c1", "timeout_s": 1e400}', "timeout_s"),
            (ChannelVerbs.events.path, b'{"cluster": "c1", "after_id": ' + b"9" * 40 + b"}", "after_id"),
            (ChannelVerbs.events.path, b'{"cluster": "c1", "after_id": 9223372036854775808}', "after_id")]:
        answer = client._pool.urlopen("POST", path, body=body, headers={"Authorization": f"Bearer {made.token()}"})
        assert answer.status == 400, (body, answer.status)
        refusal = records.ErrorReply.model_validate_json(answer.data)
        assert refusal.message.startswith(f"{field}:") and refusal.exit_code == 2
    assert api.asked == []
    largest = b'{"cluster": "c1", "after_id": 9223372036854775807}'  # SQLite's largest INTEGER is taken
    answer = client._pool.urlopen("POST", ChannelVerbs.events.path, body=largest,
                                  headers={"Authorization": f"Bearer {made.token()}"})
    assert answer.status == 200 and api.asked == [("events", CLUSTER, (1 << 63) - 1)]


def test_a_body_over_the_limit_is_refused_with_413_also_when_it_comes_in_chunks(controller, api) -> None:
    """A chunked body gives no length up front: it is refused once it passes the limit, as a
    sized one is by its length (valid JSON either way: only its size is wrong)."""
    from podmanager.channel.server import MAX_BODY_BYTES

    made, server = controller
    client = ChannelClient(install(made, server))
    body = b'{"cluster": "c1", "after_id": 0' + b" " * MAX_BODY_BYTES + b"}"

    def chunks():
        for start in range(0, len(body), 64 << 10):
            yield body[start:start + (64 << 10)]

    headers = {"Authorization": f"Bearer {made.token()}"}
    for sent in (body, chunks()):
        answer = client._pool.urlopen("POST", ChannelVerbs.events.path, body=sent, headers=headers,
                                      chunked=not isinstance(sent, bytes))
        assert answer.status == 413
        assert records.ErrorReply.model_validate_json(answer.data).exit_code == 2
    assert api.asked == []


def test_on_loopback_only_the_owners_processes_are_admitted(controller, api, monkeypatch) -> None:
    made, server = controller
    client = ChannelClient(install(made, server))
    monkeypatch.setattr(peer, "owner_uid", lambda: 1_000_000)  # this test's process is now someone else's
    with pytest.raises(RemoteError) as refused:
        client.status(CLUSTER)
    assert "admits only its owner" in refused.value.message and api.asked == []


def test_an_unreachable_controller_is_a_clear_error(controller) -> None:
    made, server = controller
    credentials = install(made, server)
    server.stop()
    with pytest.raises(ChannelError) as unreachable:
        ChannelClient(credentials).status(CLUSTER)
    assert f"cannot reach the controller of {CLUSTER} at 127.0.0.1:{server.port}" in unreachable.value.message
    # The fix for a laptop whose address changed: the rule named, and the one command that admits it.
    assert f"pm-{CLUSTER}-channel" in unreachable.value.hint
    assert f"'podmanager access add -c {CLUSTER} " in unreachable.value.hint


def test_the_controller_tells_an_authenticated_caller_where_it_came_from(controller, api) -> None:
    made, server = controller
    credentials = install(made, server)
    with ChannelClient(credentials) as client:
        assert client.caller() == "127.0.0.1"  # the connection's source, as the controller saw it
    answer = ChannelClient(credentials)._pool.urlopen("GET", records.CALLER_PATH, headers={})
    assert answer.status == 401  # behind the token, as every verb


def test_the_client_imports_neither_ray_nor_jax() -> None:
    code = ("import sys, podmanager.client.channel_client; "
            "print(sorted(m for m in ('ray', 'jax', 'podmanager.channel.server', 'podmanager.api') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]", loaded



def channel_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "podmanager-channel"]


def test_the_server_stops_its_thread_also_when_it_cannot_listen(api) -> None:
    made = identity.load_or_create(CLUSTER, "127.0.0.1")
    with ChannelServer(api, made) as first:
        assert len(channel_threads()) == 1
        with pytest.raises(OSError):  # the port is taken: start fails, and leaves nothing running
            ChannelServer(api, made, port=first.port).start()
        assert len(channel_threads()) == 1
    assert channel_threads() == []
