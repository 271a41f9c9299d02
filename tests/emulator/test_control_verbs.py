"""The emulator's control verbs (`emulator/control_verbs.py`): one table that the client and
the server's dispatch both read, so a verb is one entry, one handler and one client method."""

import inspect
import json
from collections.abc import Iterator

import grpc
import pytest
from pydantic import ValidationError

from podmanager.cloud.base import NodeState
from podmanager.core.clock import FakeClock
from podmanager.emulator import control_verbs as verbs
from podmanager.emulator.control import EmulatorControl
from podmanager.emulator.server import Emulator
from podmanager.emulator.sim.cloud import SimCloud
from podmanager.emulator.tpu_api import TpuEmulator

PROJECT = "p-verbs"


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    served = Emulator(PROJECT, persist=False)
    yield served
    served.stop()


def test_every_verb_has_a_handler_in_the_emulator_and_nothing_else_is_served(emulator):
    assert set(emulator.api.controls) == set(verbs.VERBS)


def test_every_verb_has_a_client_method_that_sends_it(monkeypatch):
    """Each verb's client method exists and sends that verb, its request validated by the entry."""
    control = EmulatorControl("127.0.0.1:1")
    sent: list[str] = []

    def send(method, args):
        sent.append(method)
        verbs.VERBS[method].request.model_validate(args)
        return None  # no reply checked here: the reply types are checked through a server below

    monkeypatch.setattr(control, "ask", lambda verb, request: send(verb.name, request.model_dump(mode="json")))
    try:
        for name in verbs.VERBS:
            method = getattr(control, name)
            required = {p.name: _example(p) for p in inspect.signature(method).parameters.values()
                        if p.default is inspect.Parameter.empty and p.kind is not p.VAR_POSITIONAL}
            method(**required)
            assert sent[-1] == name, name
    finally:
        control.close()


def _example(parameter: inspect.Parameter) -> object:
    hint = str(parameter.annotation)
    return 1 if "int" in hint else 1.0 if "float" in hint else "TERMINATED" if parameter.name == "state" else "x"


def test_a_request_round_trips_through_its_json_and_unknown_fields_are_refused():
    degrade = verbs.NodeDegrade(zone="z", node_id="n", state=NodeState.UNKNOWN, for_s=3.0)
    sent = json.loads(json.dumps(degrade.model_dump(mode="json")))
    assert verbs.DEGRADE.request.model_validate(sent) == degrade and sent["state"] == "UNKNOWN"
    with pytest.raises(ValidationError, match="node"):
        verbs.PREEMPT.request.model_validate({"zone": "z", "node": "n"})  # a misspelt field is not dropped


@pytest.fixture
def served() -> Iterator[tuple[SimCloud, str]]:
    sim = SimCloud(clock=FakeClock(), create_latency_s=10.0)
    server, port = TpuEmulator(sim).serve()
    try:
        yield sim, f"127.0.0.1:{port}"
    finally:
        server.stop(grace=None).wait()


def test_replies_come_back_typed_and_bad_arguments_are_refused_by_the_server(served):
    sim, address = served
    with EmulatorControl(address) as control:
        control.inject_transient(2)
        faults = control.pending_faults()
        assert faults.transient == 2 and faults == sim.pending_faults()
        assert control.known_zones() == sim.known_zones() and isinstance(control.version(), int)
        with pytest.raises(grpc.RpcError, match="calls"):  # sent around the client's own check
            control._send("inject_transient", {"calls": "many"})
        with pytest.raises(grpc.RpcError, match="control version 2"):
            control._call(json.dumps({"version": 2, "method": "version", "args": {}}).encode(), timeout=10)
        with pytest.raises(grpc.RpcError, match="not served here"):  # an Emulator's verb, of a bare TpuEmulator
            control.crash_controller_vm("c")
    assert sim.pending_faults().transient == 2
