"""Serve train_transformer.py's latest checkpoint: the next token of each sequence.

    podmanager serve -c NAME --checkpoint-dir DIR [--follow-checkpoints] workloads/serve_transformer.py

Each replica is one slice; the model is laid out over all its hosts' chips as in training
(`--parallelism`, default as much tensor parallelism as the heads allow), so every host runs
the forward pass of every batch. A request's `inputs` is a list of token ids (1 to --seq-len
of them, each below --vocab); its `outputs` the id of the most likely next token. An input
that is not such a list gets `{"error": ...}` as its output (a bad request must not stop the
replica). Give the model flags the training run had. With `--follow-checkpoints` a newer
checkpoint of the training run is loaded into the same compiled forward pass (`reload`).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `workloads` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from podmanager import runtime  # noqa: E402
from workloads import common, train_transformer  # noqa: E402


def parse_args(argv=None):
    p = common.base_parser(__doc__.splitlines()[0], default_parallelism="auto", default_batch=8, default_lr=0.0)
    train_transformer.add_model_args(p)
    p.add_argument("--max-batch", type=int, default=8, help="requests per forward pass (default 8)")
    p.add_argument("--max-wait-ms", type=float, default=5.0,
                   help="how long a batch waits for more requests after its first (default 5)")
    return p.parse_args(argv)


def check_input(tokens, args) -> str | None:
    """Why `tokens` is no input for this model, or None."""
    if not isinstance(tokens, list) or not 1 <= len(tokens) <= args.seq_len:
        return f"inputs must be a list of 1 to {args.seq_len} token ids"
    if not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < args.vocab for t in tokens):
        return f"token ids must be integers in [0, {args.vocab})"
    return None


def next_tokens(logits: np.ndarray, lengths: list[int]) -> list[int]:
    """The most likely next token after each sequence: the logits at its last real position
    (causal attention: the padding after it changes nothing before it)."""
    return [int(np.argmax(logits[i, n - 1])) for i, n in enumerate(lengths)]


def load_predict(args):
    """(the checkpoint's step, predict) for the latest checkpoint of `args.checkpoint_dir`, laid
    out on this job's devices; None if there is no checkpoint. Every process calls it."""
    step = latest_step(args)
    return None if step is None else (step, predict_loader(args)(step))


def latest_step(args) -> int | None:
    checkpoints = runtime.Checkpointer(args.checkpoint_dir, read_only=True)
    try:
        return checkpoints.latest_step()
    finally:
        checkpoints.close()


def predict_loader(args):
    """A function of a checkpoint step to predict for that checkpoint: its parameters restored
    onto this job's devices, run by one compiled forward pass shared by every step."""
    mesh = train_transformer.model_mesh(args)
    data = mesh.shape["data"]
    batch = -(-args.max_batch // data) * data  # one compiled shape: a multiple of the data axis
    dtype = common.DTYPES[args.dtype]
    template, state_sharding = train_transformer.initial_state(args, mesh)
    batch_sharding = NamedSharding(mesh, P("data", None))
    forward = jax.jit(lambda p, tokens: train_transformer.forward(p, tokens, dtype, mesh),
                      in_shardings=(state_sharding["params"], batch_sharding), out_shardings=common.replicated(mesh))

    def load(step: int):
        checkpoints = runtime.Checkpointer(args.checkpoint_dir, read_only=True)
        try:
            params = checkpoints.restore(step, template)["params"]
        finally:
            checkpoints.close()
        return _predict(params, forward, batch, batch_sharding, args)

    return load


def _predict(params, forward, batch: int, batch_sharding, args):
    def predict(inputs: list) -> list:
        problems = [check_input(tokens, args) for tokens in inputs]
        good = [tokens for tokens, problem in zip(inputs, problems) if problem is None]
        answers = iter(())
        if good:
            tokens = np.zeros((batch, args.seq_len), np.int32)
            for i, sequence in enumerate(good):
                tokens[i, :len(sequence)] = sequence
            logits = forward(params, common.to_global(tokens, batch_sharding))
            # Replicated: every process holds all of it on each of its devices.
            answers = iter(next_tokens(np.asarray(logits.addressable_shards[0].data), [len(t) for t in good]))
        return [next(answers) if problem is None else {"error": problem} for problem in problems]

    return predict


def run(argv=None) -> int:
    args = parse_args(argv)
    runtime.install_preemption_handler()  # SIGTERM -> drain, from the earliest moment
    runtime.initialize()
    load = predict_loader(args)
    step = latest_step(args)
    if step is None:
        common.say(f"error: no checkpoint in {args.checkpoint_dir or '$PODMANAGER_CHECKPOINT_DIR'}; "
                   "train with workloads/train_transformer.py --checkpoint-dir DIR first")
        return 1
    common.say(f"serving step {step}: processes={jax.process_count()} devices={jax.device_count()} "
               f"parallelism={args.parallelism} max_batch={args.max_batch}")

    def reload(new_step: int):
        common.say(f"loading step {new_step}")
        return load(new_step)

    return runtime.serve(load(step), warmup=[[0, 1, 2]], max_batch=args.max_batch,
                         max_wait_s=args.max_wait_ms / 1000, step=step, reload=reload)


if __name__ == "__main__":
    sys.exit(run())
