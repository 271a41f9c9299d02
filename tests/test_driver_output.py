"""Ray's messages to the driver ("(raylet) node ... marked dead") stay off podmanager's stdout."""

import json
import logging

from ray._private import worker

from podmanager.controller import driver_output


def test_raylet_messages_go_to_the_log_not_stdout(capsys, caplog, monkeypatch):
    printed = []
    monkeypatch.setattr(worker, "print_to_stdstream", lambda data, ignore_prefix: printed.append(data))
    driver_output.keep_ray_messages_off_stdout()
    driver_output.keep_ray_messages_off_stdout()  # twice: wrapped once
    with caplog.at_level(logging.INFO, logger="podmanager.ray"):
        worker.print_to_stdstream({"lines": ["The node with node id: 93c4 has been marked dead"], "pid": "raylet",
                                   "is_err": False}, ignore_prefix=False)
    assert capsys.readouterr().out == "" and printed == []
    assert "marked dead" in caplog.text
    print(json.dumps({"status": "ok"}))  # so a --json document stays the only thing on stdout
    assert json.loads(capsys.readouterr().out) == {"status": "ok"}


def test_other_driver_output_is_printed_as_ray_would(monkeypatch):
    printed = []
    monkeypatch.setattr(worker, "print_to_stdstream", lambda data, ignore_prefix: printed.append(data))
    driver_output.keep_ray_messages_off_stdout()
    worker.print_to_stdstream({"lines": ["hello"], "pid": 123, "is_err": False}, ignore_prefix=False)
    assert printed == [{"lines": ["hello"], "pid": 123, "is_err": False}]
