"""Where each process of a workload runs and with which environment (pure).

`launch_envs` gives each process its distributed environment, fresh for every attempt —
stale coordinator or MEGASCALE_* values from before a slice was replaced make JAX
initialization hang. `gang.Gang` launches the processes with it.
"""

from __future__ import annotations

from podmanager.core.records import HostSlot
from podmanager.runtime import contract
from podmanager.runtime.launch import (
    JAX_CACHE_MIN_COMPILE_S_ENV,
    JAX_COMPILATION_CACHE_ENV,
    JAX_PREEMPTION_SERVICE_ENV,
)

MEGASCALE_PORT = 8081


def launch_envs(slots: list[HostSlot], *, coordinator_port: int, cluster: str, run_id: str, attempt: int,
                checkpoint_dir: str | None, parallelism: str | None, simulated: bool,
                extra: dict[str, str] | None = None, megascale_port: int = MEGASCALE_PORT,
                compile_cache: str | None = None) -> list[dict[str, str]]:
    """The environment of each slot's process, in the order of `slots` (slice, then worker).
    `compile_cache`: a folder every process reads XLA's compiled programs from (JAX writes them
    from process 0 only, so only a folder all hosts share lets the others skip compiling)."""
    if sorted(slots, key=lambda s: (s.slice_index, s.worker_id)) != slots:
        raise ValueError("slots must be ordered by slice, then worker id")
    slice_indexes = sorted({s.slice_index for s in slots})
    coordinator = slots[0]
    hostnames = {i: ",".join(s.ip for s in slots if s.slice_index == i) for i in slice_indexes}
    envs = []
    for process_id, slot in enumerate(slots):
        env = {
            **(extra or {}),
            "JAX_COORDINATOR_ADDRESS": f"{coordinator.ip}:{coordinator_port}",
            "JAX_NUM_PROCESSES": str(len(slots)),
            "JAX_PROCESS_ID": str(process_id),
            "TPU_WORKER_ID": str(slot.worker_id),
            "TPU_WORKER_HOSTNAMES": hostnames[slot.slice_index],
            contract.ENV_CLUSTER: cluster,
            contract.ENV_SLICE: str(slot.slice_index),
            contract.ENV_NUM_SLICES: str(len(slice_indexes)),
            contract.ENV_RUN_ID: run_id,
            contract.ENV_ATTEMPT: str(attempt),
            # JAX's preemption service takes SIGTERM over in `jax.distributed.initialize()` and
            # swallows it: every cancel would wait out the grace and a SIGKILL, and podmanager's
            # handler (`runtime.install_preemption_handler`) would never hear a notice. A run
            # that wants JAX's service sets it back with `--env`.
            JAX_PREEMPTION_SERVICE_ENV: "false",
        }
        if compile_cache:
            env[JAX_COMPILATION_CACHE_ENV] = compile_cache
            # Every compile: on local disk keeping one costs little, and a CPU device's compiles
            # (each under JAX's 1 s) add up to seconds at every launch.
            env[JAX_CACHE_MIN_COMPILE_S_ENV] = "0"
        if parallelism:
            env[contract.ENV_PARALLELISM] = parallelism
        if checkpoint_dir:
            env[contract.ENV_CHECKPOINT_DIR] = checkpoint_dir
        if len(slice_indexes) > 1:
            env.update({
                "MEGASCALE_COORDINATOR_ADDRESS": f"{coordinator.ip}:{megascale_port}",
                "MEGASCALE_NUM_SLICES": str(len(slice_indexes)),
                "MEGASCALE_SLICE_ID": str(slice_indexes.index(slot.slice_index)),
                "MEGASCALE_PORT": str(megascale_port),
            })
        if simulated:
            # The host's chips become CPU devices; an unmodified JAX program sees them as its local devices.
            env["JAX_PLATFORMS"] = "cpu"
            env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={slot.chips}"
            # JAX's Cloud TPU cluster detection is off without libtpu: on, an unmodified
            # `jax.distributed.initialize()` finds its process id and peers as on a TPU VM.
            env["JAX_FORCE_TPU_INIT"] = "1"
        envs.append(env)
    return envs
