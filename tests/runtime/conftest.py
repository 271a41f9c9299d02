"""The runtime's tests: each starts from a clean runtime and none of the launch's variables."""

from __future__ import annotations

import pytest

from podmanager import runtime


@pytest.fixture
def clean_runtime(monkeypatch):
    for name in ("PODMANAGER_PROGRESS_FILE", "PODMANAGER_CHECKPOINT_DIR", "JAX_NUM_PROCESSES",
                 "JAX_PROCESS_ID", "JAX_COORDINATOR_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    runtime._reset_for_tests()
    yield
    runtime._reset_for_tests()

