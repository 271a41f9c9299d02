"""controller/head.py: the Ray head's command line: a small object store, no token on it, and
health checks tuned for a simulated cluster or left at Ray's safe defaults on Google Cloud."""

from __future__ import annotations

from podmanager.core.spec import parse_spec
from podmanager.vm import auth, ray_node


def head_health_checks(spec) -> dict:
    import json

    from podmanager.controller import head

    command = head.head_command(spec, "10.0.0.2", 6379, 8265, 10001, 52365)
    return json.loads(next(c for c in command if c.startswith("--system-config=")).split("=", 1)[1])


def test_head_command_has_a_small_store_and_no_token(home):
    from podmanager.controller import head

    spec = parse_spec({"name": "h", "project": "my-project", "zones": ["z"], "slices": [{"accelerator": "v4-8"}],
                       "head": {"dashboard_host": "127.0.0.1"}})
    command = head.head_command(spec, "10.0.0.2", 6379, 8265, 10001, 52365)
    assert command[3:5] == ["start", "--head"]
    assert "--node-ip-address=10.0.0.2" in command and "--port=6379" in command
    assert "--dashboard-host=127.0.0.1" in command
    assert f"--object-store-memory={ray_node.OBJECT_STORE_BYTES}" in command
    assert not any(auth.token_path("h").exists() and auth.token_path("h").read_text() in c for c in command)


def test_a_simulated_head_detects_a_dead_host_in_about_a_second_and_a_half(home):
    spec = parse_spec({"name": "h", "backend": "simulated", "slices": [{"accelerator": "v4-8"}]})
    assert head_health_checks(spec) == {
        "health_check_period_ms": 500, "health_check_failure_threshold": 3, "health_check_timeout_ms": 500}


def test_a_gcp_head_keeps_rays_safe_defaults_so_a_pause_kills_no_slice(home):
    """Ray's own defaults (ray_config_def.h): 5 missed checks, every 3 s, each allowed 10 s."""
    spec = parse_spec({"name": "h", "project": "my-project", "zones": ["z"], "slices": [{"accelerator": "v4-8"}]})
    # A host whose process died is declared dead after ~15 s, one that went silent after ~1 min:
    # far past a GC pause or a network blip.
    assert head_health_checks(spec) == {"health_check_period_ms": 3000, "health_check_failure_threshold": 5,
                                        "health_check_timeout_ms": 10000}
