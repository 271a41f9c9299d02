"""Data-parallel training of an MLP classifier on synthetic data.

The batch is sharded over the mesh's "data" axis and the parameters are
replicated; XLA all-reduces the gradients. Labels come from a fixed random
"teacher" network, so the problem is learnable and the loss falls.

    python workloads/train_mlp.py --steps 200 --parallelism data

Runs unchanged on a TPU slice (one process per host, started by podmanager)
and on simulated hosts (JAX on CPU devices).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `workloads` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from podmanager import runtime  # noqa: E402
from workloads import common  # noqa: E402


def parse_args(argv=None):
    p = common.base_parser(__doc__.splitlines()[0], default_parallelism="data",
                           default_batch=256, default_lr=3e-3)
    p.add_argument("--features", type=int, default=32)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--layers", type=int, default=2, help="hidden layers")
    return p.parse_args(argv)


def teacher(args) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([args.seed, 0])
    w1 = rng.standard_normal((args.features, 64)).astype(np.float32) / np.sqrt(args.features)
    w2 = rng.standard_normal((64, args.classes)).astype(np.float32) / 8.0
    return w1, w2


def host_batch(args, t, step: int) -> tuple[np.ndarray, np.ndarray]:
    """Global batch ``step``: identical on every process, a function of (seed, step)."""
    x = common.step_rng(args.seed, step).standard_normal(
        (args.global_batch, args.features)).astype(np.float32)
    y = np.argmax(np.tanh(x @ t[0]) @ t[1], axis=-1).astype(np.int32)
    return x, y


def init_params(key, args):
    sizes = [args.features] + [args.hidden] * args.layers + [args.classes]
    params = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        k = jax.random.fold_in(key, i)
        params.append({"w": jax.random.normal(k, (n_in, n_out), jnp.float32) / jnp.sqrt(n_in),
                       "b": jnp.zeros((n_out,), jnp.float32)})
    return params


def loss_fn(params, x, y, dtype):
    h = x.astype(dtype)
    p = common.cast(params, dtype)
    for layer in p[:-1]:
        h = jax.nn.gelu(h @ layer["w"] + layer["b"])
    logits = (h @ p[-1]["w"] + p[-1]["b"]).astype(jnp.float32)
    logp = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=-1))


def run(argv=None) -> int:
    args = parse_args(argv)
    runtime.install_preemption_handler()  # SIGTERM -> flag, from the earliest moment
    runtime.initialize()  # before any other JAX call
    mesh = common.make_mesh(args.parallelism)
    common.check_divisible("--global-batch", args.global_batch, "data", mesh.shape["data"])
    dtype = common.DTYPES[args.dtype]
    repl = common.replicated(mesh)
    batch_sharding = NamedSharding(mesh, P("data"))

    def init(key):
        params = init_params(key, args)
        return {"params": params, "opt": common.adam_init(params),
                "loss": jnp.zeros((), jnp.float32)}

    state = jax.jit(init, out_shardings=repl)(jax.random.key(args.seed))
    state_sharding = jax.tree.map(lambda x: x.sharding, state)

    def step_fn(state, batch):
        x, y = batch
        loss, grads = jax.value_and_grad(loss_fn)(state["params"], x, y, dtype)
        params, opt = common.adam_update(state["params"], grads, state["opt"], args.lr)
        return {"params": params, "opt": opt, "loss": loss}, loss

    train_step = jax.jit(step_fn, in_shardings=(state_sharding, batch_sharding),
                         out_shardings=(state_sharding, repl), donate_argnums=0)
    t = teacher(args)

    def make_batch(step):
        x, y = host_batch(args, t, step)
        return common.to_global(x, batch_sharding), common.to_global(y, batch_sharding)

    # The global batch stays --global-batch on any number of slices (an elastic run shrunk to
    # fewer, or grown back): each device takes its share, so the loss curve is the same.
    common.say(f"mlp: slices={runtime.slice_count()} processes={jax.process_count()} devices={jax.device_count()} "
               f"mesh={dict(mesh.shape)} dtype={args.dtype} global_batch={args.global_batch}")
    return common.train_loop(args, state, train_step, make_batch)


if __name__ == "__main__":
    sys.exit(run())
