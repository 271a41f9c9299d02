"""Starting a service: its router next to the head, then one replica run per slice.

A replica is an ordinary run of the service's program on one slice (`submit_run`), with the
router's address in its environment (its token, a secret, in an owner-only file the supervisor
reads at each launch: `state/service_tokens.py`): its supervisor launches it, watches it and
replaces its slice after a preemption exactly as for training, and the program's
`runtime.serve` connects to the router once the model is loaded and warm.
"""

from __future__ import annotations

import time
from pathlib import Path

from podmanager.api.cancel import cancel_run
from podmanager.api.service_handle import open_service
from podmanager.api.submission import run_slices
from podmanager.api.submit import packed, submit_run
from podmanager.cluster.cluster_runtime import ClusterRuntime
from podmanager.core.code_zip import PackedCode
from podmanager.core.errors import PodmanagerError, SpecError
from podmanager.core.events import EventKind
from podmanager.core.serve_options import ServeOptions
from podmanager.core.workload import Workload
from podmanager.runtime import replica_protocol as protocol
from podmanager.runtime.contract import ENV_CHECKPOINT_DIR
from podmanager.serving.router import RouterConfig
from podmanager.serving.router_actor import RouterPlace, start_router, stop_router
from podmanager.state import service_tokens
from podmanager.state.run_records import RunStore
from podmanager.state.services import ServiceRecord, ServiceStore


def replica_slices(known: list[int], replicas: int | None) -> list[int]:
    """The slices the replicas run on: the first `replicas` of `known` (all of them for None)."""
    if replicas is None:
        return known
    if replicas < 1:
        raise SpecError(f"--replicas {replicas}: a service needs at least one replica")
    if replicas > len(known):
        raise SpecError(f"--replicas {replicas}: each replica is one slice and there are {len(known)} "
                        f"({known})", hint="Add slices to the spec and run 'podmanager up', or ask for fewer replicas.")
    return known[:replicas]


def new_service_id(workload: Workload) -> str:
    return f"{workload.display_name}-svc-{time.strftime('%Y%m%d-%H%M%S')}-{int(time.time() * 1000) % 1000:03d}"


class ServeInterrupted(KeyboardInterrupt):
    """Ctrl-C while `serve` was starting the service; what was started is stopped again."""

    def __init__(self, service_id: str, undone: bool) -> None:
        super().__init__(f"serve interrupted: service {service_id} " + (
            "was not started; its router and replica runs were stopped" if undone else
            f"may be partly started; stop it with 'podmanager cancel {service_id}'"))
        self.service_id = service_id


def start_service(runtime: ClusterRuntime, runs: RunStore, services: ServiceStore, workload: Workload,
                  options: ServeOptions, budgets: dict[str, int], code: PackedCode | None = None) -> str:
    """Start a service of `workload` and return its id once its router listens and every
    replica's run is submitted (the replicas become ready as they load and warm up). Bad
    input starts nothing. The service's record is written before anything starts, so `runs`
    lists it and `cancel` stops it whatever happens next; a failure or Ctrl-C after that stops
    what was started (the router, the runs submitted) and marks the record failed (cancelled
    for Ctrl-C, raised as `ServeInterrupted`)."""
    if options.queue_timeout_s <= 0:
        raise SpecError(f"--queue-timeout {options.queue_timeout_s}: give a number of seconds above 0")
    if options.follow_checkpoints and not (workload.checkpoint_dir or workload.env.get(ENV_CHECKPOINT_DIR)):
        raise SpecError("--follow-checkpoints: the service has no checkpoint dir to follow",
                        hint="Give --checkpoint-dir DIR, the training run's.")
    workload = workload.submitted(Path.cwd())
    code = packed(workload, code)  # once for every replica
    slices = replica_slices(run_slices(runtime.spec, workload, runs.spares(runtime.name),
                                       shipped=code.files if code else None), options.replicas)
    if runtime.hosts is None:
        raise SpecError("simulation.boot_hosts is false: this dry-run cluster has no hosts to serve on")
    busy = [r for r in runs.active(runtime.name) if set(r.slices) & set(slices)]
    if busy:
        raise SpecError(f"serve: slice(s) {sorted(set(busy[0].slices) & set(slices))} are busy with run "
                        f"{busy[0].run_id} ({busy[0].status})",
                        hint="Cancel it, or serve on other slices with --slices / --replicas.")
    if not runtime.connect_ray():
        raise PodmanagerError(f"cluster {runtime.name} has no Ray head", hint="Run 'podmanager up -f SPEC' first.")
    service_id = new_service_id(workload)
    place = _router_place(runtime, options)
    endpoint = f"http://{place.public_host}:{place.public_port}"
    replica_url = f"ws://{place.replica_host}:{place.replica_port}{protocol.REPLICA_PATH}"
    service_tokens.create(runtime.name, service_id)
    services.create(ServiceRecord(service_id=service_id, cluster=runtime.name, program=workload.display_name,
                                  slices=slices, endpoint=endpoint, replica_url=replica_url))
    try:
        start_router(runtime.name, service_id, RouterConfig(token="", slices=tuple(slices),
                                                            queue_timeout_s=options.queue_timeout_s,
                                                            replicas=len(slices)), place)
        runtime.record(EventKind.SERVICE_STARTING, f"service {service_id}: router at {endpoint}, {len(slices)} replica(s) "
                       f"on slice(s) {slices}", service_id=service_id)
        for index in slices:
            env = {**workload.env, protocol.ENV_SERVE_URL: replica_url, protocol.ENV_SERVICE_ID: service_id,
                   protocol.ENV_REPLICA: str(index)}
            if options.follow_checkpoints:
                env[protocol.ENV_FOLLOW_CHECKPOINTS] = "1"
            replica = workload.model_copy(update={"slices": [index], "env": env})
            services.add_replica_run(service_id, submit_run(runtime, runs, replica, budgets, code))
    except BaseException as error:
        undone = _undo(runs, services, service_id, runtime.name, error)
        if isinstance(error, KeyboardInterrupt):
            raise ServeInterrupted(service_id, undone) from None
        raise
    return service_id


def cancel_service(runtime: ClusterRuntime, runs: RunStore, services: ServiceStore, service_id: str) -> ServiceRecord:
    """Stop a service: each replica's run (it drains and stops), then its router."""
    handle = open_service(runtime.name, service_id, services=services, runs=runs)
    if handle.record().finished:
        return handle.record()
    service = handle.mark_cancelled()
    for run_id in service.replica_runs:
        run = runs.get(run_id)
        if run is not None and run.active:
            cancel_run(runtime, runs, run, f"cancelling run {run_id}, replica of service {service_id}")
    if runtime.connect_ray():
        stop_router(service_id)  # (no head: the router went with it)
    service_tokens.remove(runtime.name, service_id)
    runtime.record(EventKind.SERVICE_CANCELLED, service.message, service_id=service_id)
    return handle.record()


def _undo(runs: RunStore, services: ServiceStore, service_id: str, cluster: str, error: BaseException) -> bool:
    """Stop what a `serve` that failed had started; True if all of it is stopped. A second
    Ctrl-C meanwhile leaves the rest to 'podmanager cancel', which the record makes possible."""
    try:
        service = services.get(service_id)
        for run_id in service.replica_runs if service is not None else []:
            runs.request_cancel(run_id)
        stop_router(service_id)
        service_tokens.remove(cluster, service_id)
        if service is not None:
            interrupted = isinstance(error, KeyboardInterrupt)
            service.status = "cancelled" if interrupted else "failed"
            service.message = ("serve was interrupted while starting it" if interrupted else
                               f"serve failed while starting it: {error}") + "; its router and replicas were stopped"
            services.save(service)
        return True
    except KeyboardInterrupt:
        return False


def _router_place(runtime: ClusterRuntime, options: ServeOptions) -> RouterPlace:
    """Users reach the router on `options.host`; the replicas on the head's address (the TPU
    VMs reach the head, so they reach this too)."""
    from podmanager.controller.head import load_state
    from podmanager.core.local_ports import free_ports

    state = load_state(runtime.name)
    if state is None:
        raise PodmanagerError(f"cluster {runtime.name} has no Ray head", hint="Run 'podmanager up -f SPEC' first.")
    replica_host = state.address.rsplit(":", 1)[0]
    public_bind = options.host if options.host != "0.0.0.0" else ""
    if options.port:
        [replica_port] = free_ports(replica_host, avoid=(options.port,))
        return RouterPlace(options.host, options.port, replica_host, replica_port)
    public_port, replica_port = free_ports(public_bind, replica_host)
    return RouterPlace(options.host, public_port, replica_host, replica_port)
