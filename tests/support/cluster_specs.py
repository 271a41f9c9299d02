"""The specs of the dry-run clusters that end-to-end modules share (`cluster_pool`): a module
that runs on one of these gets the cluster every other module of it had, brought up once."""

from __future__ import annotations

# Two one-chip spot slices (one chip a host: fast steps), recovering at once, on a 0.5 s create
# latency (a recovery lasts long enough to be interrupted) with a second zone to fall back to:
# durable runs, inference, recovery.
ONE_CHIP_PAIR = {
    "name": "onechip",
    "backend": "simulated",
    "zones": ["sim-zone-a", "sim-zone-b"],
    "simulation": {"create_latency_s": 0.5, "delete_latency_s": 0.0},
    "health": {"interval_s": 0.5},
    "recovery": {"backoff_s": 0.0},
    "slices": [{"accelerator": "v5litepod-1", "count": 2, "capacity": "spot"}],
}

# The same two slices and a hot spare: spares, the dashboard.
ONE_CHIP_PAIR_AND_A_SPARE = {
    "name": "spared",
    "backend": "simulated",
    "zones": ["sim-zone-a"],
    "simulation": {"create_latency_s": 0.0, "delete_latency_s": 0.0},
    "health": {"interval_s": 0.5},
    "recovery": {"backoff_s": 0.0},
    "slices": [{"accelerator": "v5litepod-1", "count": 2, "spares": 1, "capacity": "spot"}],
}

# A two-host v4-16 and two one-host v4-8 slices, no recovery budget (a failure is final; a test
# that recovers asks for its budget): runs, a user's project.
MULTISLICE = {
    "name": "multislice",
    "backend": "simulated",
    "simulation": {"create_latency_s": 0.0, "delete_latency_s": 0.0},
    "health": {"interval_s": 0.5},
    "recovery": {"backoff_s": 0.0, "max_failures": 0, "max_hangs": 0, "max_preemptions": 0},
    "slices": [{"accelerator": "v4-16"}, {"accelerator": "v4-8", "count": 2}],
}
