"""Pieces shared by the example workloads: flags, Adam, input sharding, the loop.

The loop is where the podmanager contract lives: resume from the latest
complete checkpoint, report progress every step, checkpoint every N steps,
and at each step boundary honour a preemption notice by checkpointing and
exiting with ``runtime.EXIT_PREEMPTED``.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from podmanager import runtime

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def base_parser(description: str, *, default_parallelism: str, default_batch: int,
                default_lr: float) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--steps", type=int, default=200, help="total optimizer steps (default 200)")
    # `podmanager run --parallelism X` checks X against the chips and passes it down here.
    default_parallelism = os.environ.get("PODMANAGER_PARALLELISM") or default_parallelism
    p.add_argument("--parallelism", default=default_parallelism,
                   help=f"'data', 'model' or 'data=D,model=M' (default {default_parallelism!r})")
    p.add_argument("--global-batch", type=int, default=default_batch,
                   help=f"examples per step across all processes (default {default_batch})")
    p.add_argument("--seed", type=int, default=0, help="seeds the data and the initial weights")
    p.add_argument("--lr", type=float, default=default_lr, help=f"Adam learning rate (default {default_lr})")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float32",
                   help="compute dtype; parameters and optimizer state stay float32")
    p.add_argument("--checkpoint-every", type=int, default=0, metavar="N",
                   help="checkpoint every N steps and after the last one (0 = no periodic "
                        "checkpoints; with a directory, a preemption still saves one and a "
                        "rerun still resumes from the latest)")
    p.add_argument("--checkpoint-dir", default=None,
                   help="checkpoint directory (default $PODMANAGER_CHECKPOINT_DIR)")
    p.add_argument("--log-every", type=int, default=10, metavar="K",
                   help="print the loss every K steps, 0 = first and last only (default 10)")
    p.add_argument("--min-step-s", type=float, default=0.0, metavar="S",
                   help="make each step last at least S seconds (a long dry-run run on CPU devices that "
                        "leaves the machine's cores to the rest; default 0: as fast as it goes)")
    return p


# ---------------------------------------------------------------- optimizer


def adam_init(params: Any) -> dict[str, Any]:
    return {"m": jax.tree.map(jnp.zeros_like, params), "v": jax.tree.map(jnp.zeros_like, params),
            "count": jnp.zeros((), jnp.int32)}


def adam_update(params: Any, grads: Any, opt: dict[str, Any], lr: float,
                b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8):
    """One Adam step in float32 (grads are cast up if computed in bf16)."""
    count = opt["count"] + 1
    t = count.astype(jnp.float32)
    grads = jax.tree.map(lambda g: g.astype(jnp.float32), grads)
    m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, opt["m"], grads)
    v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, opt["v"], grads)
    scale = lr * jnp.sqrt(1 - b2 ** t) / (1 - b1 ** t)
    params = jax.tree.map(lambda p, m, v: p - scale * m / (jnp.sqrt(v) + eps), params, m, v)
    return params, {"m": m, "v": v, "count": count}


def cast(tree: Any, dtype) -> Any:
    return jax.tree.map(lambda x: x.astype(dtype), tree)


# ---------------------------------------------------------------- input


def step_rng(seed: int, step: int) -> np.random.Generator:
    """The data stream: batch ``step`` depends only on (seed, step)."""
    return np.random.default_rng([seed, 1, step])


def to_global(host_array: np.ndarray, sharding: NamedSharding) -> jax.Array:
    """Place a global batch (identical on every process) onto the mesh.

    Each process hands over only the shards its own devices hold.
    """
    return jax.make_array_from_callback(host_array.shape, sharding, lambda idx: host_array[idx])


def replicated(mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def make_mesh(parallelism: str):
    """runtime.mesh, with a wrong shape reported as a one-line error."""
    try:
        return runtime.mesh(parallelism)
    except ValueError as e:
        raise SystemExit(f"error: --parallelism: {e}") from None


def check_divisible(what: str, value: int, axis: str, size: int) -> None:
    if value % size:
        raise SystemExit(f"error: {what}={value} is not divisible by the {axis!r} axis size {size}")


# ---------------------------------------------------------------- loop


def is_main() -> bool:
    return jax.process_index() == 0


def say(msg: str) -> None:
    if is_main():
        print(msg, flush=True)


def train_loop(args: argparse.Namespace, state: dict[str, Any],
               train_step: Callable[[dict[str, Any], Any], tuple[dict[str, Any], jax.Array]],
               make_batch: Callable[[int], Any]) -> int:
    """Run steps ``start+1 .. args.steps``; return the process exit code.

    ``state`` must hold a float32 scalar ``"loss"`` (the last step's loss)
    so a run resumed after its last step can still report it.
    Step ``s`` trains on ``make_batch(s)``; the checkpoint saved as step ``s``
    is the state after ``s`` updates.
    """
    ckpt = runtime.Checkpointer(args.checkpoint_dir, args.checkpoint_every)
    try:
        done = 0
        restored = ckpt.restore_latest(state)
        if restored is not None:
            done, state = restored
            say(f"resumed from step {done}")
        loss = float(state["loss"])
        first = done + 1
        for step in range(first, args.steps + 1):
            began = time.monotonic()
            state, loss_arr = train_step(state, make_batch(step))
            loss, done = float(loss_arr), step
            runtime.report_progress(step, loss=loss, total_steps=args.steps)  # a notice at the last step ends the run
            if step in (first, args.steps) or (args.log_every > 0 and step % args.log_every == 0):
                say(f"step {step} loss {loss:.6f}")
            ckpt.save(step, state, force=ckpt.every_n_steps > 0 and step == args.steps)
            if step < args.steps and runtime.preemption_requested_anywhere():
                ckpt.save(step, state, force=True)
                say(f"preempted step={step} checkpoint={ckpt.latest_step()}")
                return runtime.EXIT_PREEMPTED
            if args.min_step_s > 0:
                time.sleep(max(0.0, began + args.min_step_s - time.monotonic()))
    finally:
        ckpt.close()
    say(f"done steps={done} final_loss={loss:.6f}")
    return runtime.EXIT_OK
