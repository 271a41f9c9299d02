"""What a workload process and its supervisor agree on: exit codes, the environment podmanager
sets for each process, and the progress records the program writes. Plain constants, so the
supervisor side imports them without pulling in JAX.
"""

from __future__ import annotations

# Exit codes a workload process ends with.
EXIT_OK = 0
EXIT_PREEMPTED = 75  # stopped at a step boundary after a preemption notice (BSD EX_TEMPFAIL)

# Environment podmanager sets for every process of a run, fresh for each attempt.
ENV_CLUSTER = "PODMANAGER_CLUSTER"
ENV_SLICE = "PODMANAGER_SLICE"
ENV_RUN_ID = "PODMANAGER_RUN_ID"
ENV_ATTEMPT = "PODMANAGER_ATTEMPT"
ENV_PARALLELISM = "PODMANAGER_PARALLELISM"
ENV_CHECKPOINT_DIR = "PODMANAGER_CHECKPOINT_DIR"
ENV_PROGRESS_FILE = "PODMANAGER_PROGRESS_FILE"

# A progress record is one JSON object per line of the progress file: these keys, plus the
# program's metrics as floats (e.g. "loss").
PROGRESS_STEP = "step"
PROGRESS_TIME = "time"  # unix seconds when the step finished
PROGRESS_PROCESS = "process_id"
