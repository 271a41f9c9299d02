"""Tensor-parallel training of a small decoder-only transformer on synthetic sequences.

Megatron-style sharding over the mesh's "model" axis: attention heads are
split across devices (wq/wk/wv by head, wo by head), and the MLP's hidden
units too (w1 by column, w2 by row); embeddings and norms are replicated.
The batch is sharded over "data". XLA inserts the all-reduces.

The task: each sequence is an arithmetic progression modulo the vocabulary,
``x[t] = (a + b*t) mod V`` with a random start ``a`` and a random stride ``b``
from a small set; the model learns to read the stride from the context, so
the next-token loss falls well below ``ln V``.

    python workloads/train_transformer.py --steps 200 --parallelism data=2,model=4

The default ``--parallelism auto`` puts as many devices on "model" as the
head count and MLP width divide (8 by default) and the rest on "data".
"""

from __future__ import annotations

import math
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
    p = common.base_parser(__doc__.splitlines()[0], default_parallelism="auto",
                           default_batch=32, default_lr=3e-3)
    add_model_args(p)
    return p.parse_args(argv)


def add_model_args(p) -> None:
    """The model's shape: what a server of its checkpoints must be given alike."""
    p.add_argument("--vocab", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--heads", type=int, default=8, help="must be divisible by the 'model' axis")
    p.add_argument("--d-ff", type=int, default=256, help="must be divisible by the 'model' axis")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--max-stride", type=int, default=3)


def host_batch(args, step: int) -> np.ndarray:
    """Global batch ``step`` of token ids, shape [B, L+1]; a function of (seed, step)."""
    rng = common.step_rng(args.seed, step)
    start = rng.integers(0, args.vocab, size=(args.global_batch, 1))
    stride = rng.integers(1, args.max_stride + 1, size=(args.global_batch, 1))
    t = np.arange(args.seq_len + 1)[None, :]
    return ((start + stride * t) % args.vocab).astype(np.int32)


def param_specs(args):
    """PartitionSpec of every parameter: the tensor-parallel layout."""
    layer = {
        "ln1": P(), "ln2": P(),
        "wq": P(None, "model", None), "wk": P(None, "model", None), "wv": P(None, "model", None),
        "wo": P("model", None, None),
        "w1": P(None, "model"), "b1": P("model"),
        "w2": P("model", None), "b2": P(),
    }
    return {"embed": P(), "pos": P(), "ln_f": P(), "unembed": P(),
            "layers": [dict(layer) for _ in range(args.layers)]}


def init_params(key, args):
    d, h, f = args.d_model, args.heads, args.d_ff
    dh = d // h
    keys = iter(jax.random.split(key, 3 + 6 * args.layers))

    def normal(shape, fan_in):
        return jax.random.normal(next(keys), shape, jnp.float32) / jnp.sqrt(fan_in)

    params = {
        "embed": normal((args.vocab, d), 1.0),
        "pos": normal((args.seq_len, d), 1.0),
        "unembed": normal((d, args.vocab), d),
        "ln_f": jnp.ones((d,), jnp.float32),
        "layers": [],
    }
    for _ in range(args.layers):
        params["layers"].append({
            "ln1": jnp.ones((d,), jnp.float32), "ln2": jnp.ones((d,), jnp.float32),
            "wq": normal((d, h, dh), d), "wk": normal((d, h, dh), d), "wv": normal((d, h, dh), d),
            "wo": normal((h, dh, d), d) / np.sqrt(2 * args.layers),
            "w1": normal((d, f), d), "b1": jnp.zeros((f,), jnp.float32),
            "w2": normal((f, d), f) / np.sqrt(2 * args.layers), "b2": jnp.zeros((d,), jnp.float32),
        })
    return params


def rms_norm(x, scale):
    x32 = x.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + 1e-6)
    return (y * scale).astype(x.dtype)


def forward(params, tokens, dtype, mesh):
    def constrain(x, *spec):
        return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P(*spec)))

    p = common.cast(params, dtype)
    seq = tokens.shape[1]
    x = p["embed"][tokens] + p["pos"][None, :seq]
    x = constrain(x, "data", None, None)
    causal = jnp.tril(jnp.ones((seq, seq), bool))
    for layer in p["layers"]:
        h = rms_norm(x, layer["ln1"])
        q = constrain(jnp.einsum("bld,dhk->blhk", h, layer["wq"]), "data", None, "model", None)
        k = constrain(jnp.einsum("bld,dhk->blhk", h, layer["wk"]), "data", None, "model", None)
        v = constrain(jnp.einsum("bld,dhk->blhk", h, layer["wv"]), "data", None, "model", None)
        scores = jnp.einsum("bqhk,bshk->bhqs", q, k).astype(jnp.float32) / np.sqrt(q.shape[-1])
        scores = jnp.where(causal[None, None], scores, -1e9)
        attn = jax.nn.softmax(scores, axis=-1).astype(dtype)
        o = jnp.einsum("bhqs,bshk->bqhk", attn, v)
        x = x + constrain(jnp.einsum("bqhk,hkd->bqd", o, layer["wo"]), "data", None, None)
        h = rms_norm(x, layer["ln2"])
        u = constrain(jax.nn.gelu(h @ layer["w1"] + layer["b1"]), "data", None, "model")
        x = x + constrain(u @ layer["w2"] + layer["b2"], "data", None, None)
    x = rms_norm(x, p["ln_f"])
    return (x @ p["unembed"]).astype(jnp.float32)


def loss_fn(params, tokens, dtype, mesh):
    logits = forward(params, tokens[:, :-1], dtype, mesh)
    logp = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1))


def model_mesh(args):
    """The mesh for `args.parallelism`, checked against the model's shape. "auto": as much
    tensor parallelism as the heads and MLP width allow, data for the rest."""
    if args.parallelism == "auto":
        model = math.gcd(jax.device_count(), args.heads, args.d_ff)
        args.parallelism = f"data={jax.device_count() // model},model={model}"
    mesh = common.make_mesh(args.parallelism)
    common.check_divisible("--heads", args.heads, "model", mesh.shape["model"])
    common.check_divisible("--d-ff", args.d_ff, "model", mesh.shape["model"])
    if args.d_model % args.heads:
        raise SystemExit(f"error: --d-model={args.d_model} is not divisible by --heads={args.heads}")
    return mesh


def initial_state(args, mesh):
    """The training state (params, Adam's moments, last loss), laid out on `mesh`; also the
    template a checkpoint is restored into."""
    repl = common.replicated(mesh)
    param_sharding = jax.tree.map(lambda spec: NamedSharding(mesh, spec), param_specs(args),
                                  is_leaf=lambda x: isinstance(x, P))
    state_sharding = {"params": param_sharding,
                      "opt": {"m": param_sharding, "v": param_sharding, "count": repl},
                      "loss": repl}

    def init(key):
        params = init_params(key, args)
        return {"params": params, "opt": common.adam_init(params),
                "loss": jnp.zeros((), jnp.float32)}

    return jax.jit(init, out_shardings=state_sharding)(jax.random.key(args.seed)), state_sharding


def run(argv=None) -> int:
    args = parse_args(argv)
    runtime.install_preemption_handler()  # SIGTERM -> flag, from the earliest moment
    runtime.initialize()  # before any other JAX call
    mesh = model_mesh(args)
    common.check_divisible("--global-batch", args.global_batch, "data", mesh.shape["data"])
    dtype = common.DTYPES[args.dtype]
    repl = common.replicated(mesh)
    batch_sharding = NamedSharding(mesh, P("data", None))
    state, state_sharding = initial_state(args, mesh)

    def step_fn(state, tokens):
        loss, grads = jax.value_and_grad(loss_fn)(state["params"], tokens, dtype, mesh)
        params, opt = common.adam_update(state["params"], grads, state["opt"], args.lr)
        return {"params": params, "opt": opt, "loss": loss}, loss

    train_step = jax.jit(step_fn, in_shardings=(state_sharding, batch_sharding),
                         out_shardings=(state_sharding, repl), donate_argnums=0)

    def make_batch(step):
        return common.to_global(host_batch(args, step), batch_sharding)

    common.say(f"transformer: slices={runtime.slice_count()} processes={jax.process_count()} devices={jax.device_count()} "
               f"mesh={dict(mesh.shape)} dtype={args.dtype} global_batch={args.global_batch}")
    return common.train_loop(args, state, train_step, make_batch)


if __name__ == "__main__":
    sys.exit(run())
