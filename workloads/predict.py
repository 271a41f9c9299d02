"""Batch prediction over a folder of input shards that resumes after a preemption.

Each input shard (``<name>.npy``, a float32 array of feature rows) becomes one output
shard ``<name>.npy`` in ``--output-dir`` (float32 logits, one row per input row) and
nothing else: an output is written under a temporary name and renamed, so it is there
whole or not at all (on gs:// a whole-object upload is atomic, no rename needed).

Shard ``i`` of the sorted list goes to process ``i % process_count``, counted over all
hosts of all slices of the run; which shards a process owns depends only on the set of
shards and the process count. At its start every process skips the shards whose output
exists, so a rerun (the attempt after a preemption) does only what is left: no shard is
lost, none is written twice. On a preemption notice (SIGTERM) a process finishes the
shard in flight and exits 75; podmanager replaces the slice and starts the run again.

The model is the fixed "teacher" MLP of ``train_mlp.py`` (its logits are the labels that
workload learns), a function of ``--seed``. Each process runs it on its own chips only,
data parallel over rows (rows split across the process's devices, weights replicated):
no collective, so processes never wait for each other and a process with nothing left to
do is not held up.

    python workloads/predict.py --input-dir in/ --output-dir out/
    python workloads/predict.py --make-inputs 64 --input-dir in/ --output-dir out/   # demo

The output of a shard does not depend on whether the run was interrupted: same input,
weights and per-process device count give the same bytes.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `workloads` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from podmanager import runtime  # noqa: E402

SUFFIX = ".npy"
TEMP_MARK = ".tmp-"  # a temporary output is ".<name>.npy.tmp-<process>-<pid>"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--input-dir", required=True, help="folder or gs:// prefix of <name>.npy input shards")
    p.add_argument("--output-dir", required=True, help="folder or gs:// prefix for one <name>.npy per input shard")
    p.add_argument("--make-inputs", type=int, default=0, metavar="N",
                   help="write N synthetic shards shard-00000.npy ... into --input-dir first (those missing; "
                        "each process writes its own) and predict exactly those")
    p.add_argument("--rows", type=int, default=1024, help="rows per synthetic shard (default 1024)")
    p.add_argument("--features", type=int, default=32, help="input features (default 32)")
    p.add_argument("--classes", type=int, default=10, help="output logits per row (default 10)")
    p.add_argument("--seed", type=int, default=0, help="seeds the model's weights and the synthetic inputs")
    p.add_argument("--batch-rows", type=int, default=512,
                   help="rows per forward pass; a shard's last batch is padded (default 512)")
    p.add_argument("--delay-per-shard", type=float, default=0.0, metavar="S",
                   help="sleep S seconds after each shard (demos and tests: a short run to preempt)")
    return p.parse_args(argv)


# ---------------------------------------------------------------- storage


def is_url(location: str) -> bool:
    return "://" in location


class Folder:
    """A flat folder of ``<name>.npy`` shards: a local (or shared) path, or a URL such as
    ``gs://bucket/prefix`` read and written through etils epath (gcsfs underneath)."""

    def __init__(self, location: str | os.PathLike[str]):
        self.location = os.fspath(location)
        if is_url(self.location):
            from etils import epath

            self.path = epath.Path(self.location)
        else:
            self.path = Path(self.location).absolute()

    def __repr__(self) -> str:
        return f"Folder({self.location!r})"

    def create(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)

    def _entries(self) -> list[str]:
        if not self.path.exists():
            return []
        return [p.name for p in self.path.iterdir()]

    def names(self) -> list[str]:
        """The shards present, sorted: names of ``*.npy`` files, temporary ones left out."""
        return sorted(e[: -len(SUFFIX)] for e in self._entries()
                      if e.endswith(SUFFIX) and not e.startswith("."))

    def file(self, name: str):
        return self.path / f"{name}{SUFFIX}"

    def read(self, name: str) -> np.ndarray:
        return np.load(io.BytesIO(self.file(name).read_bytes()), allow_pickle=False)

    def write(self, name: str, array: np.ndarray, process_index: int = 0) -> None:
        """Write shard ``name`` whole or not at all. Locally: a temporary file beside it, synced,
        then renamed over the name (a reader or a rerun never sees part of it); on object
        storage: one upload, which is atomic."""
        data = npy_bytes(array)
        target = self.file(name)
        if is_url(self.location):
            target.write_bytes(data)
            return
        temporary = target.with_name(f".{target.name}{TEMP_MARK}{process_index}-{os.getpid()}")
        try:
            with open(temporary, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, target)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise

    def remove_leftovers(self, names: Sequence[str]) -> int:
        """Delete temporary outputs of ``names`` that an earlier attempt left when it was killed
        mid-write. Only a shard's owner calls this for it, so no live writer loses its file."""
        if is_url(self.location):
            return 0
        wanted = {f"{name}{SUFFIX}" for name in names}
        removed = 0
        for entry in self._entries():
            if entry.startswith(".") and TEMP_MARK in entry and entry[1:].split(TEMP_MARK)[0] in wanted:
                (self.path / entry).unlink(missing_ok=True)
                removed += 1
        return removed


def npy_bytes(array: np.ndarray) -> bytes:
    """The ``.npy`` encoding: the same array gives the same bytes."""
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    return buffer.getvalue()


# ---------------------------------------------------------------- assignment


def assigned(names: Sequence[str], process_index: int, process_count: int) -> list[str]:
    """The shards process ``process_index`` owns: the ``i``-th of ``sorted(names)`` goes to
    process ``i % process_count``. Pure: every process computes the same split."""
    if not 0 <= process_index < process_count:
        raise ValueError(f"process {process_index} is outside [0, {process_count})")
    return sorted(names)[process_index::process_count]


def synthetic_name(index: int) -> str:
    return f"shard-{index:05d}"


def synthetic_shard(seed: int, index: int, rows: int, features: int) -> np.ndarray:
    """Synthetic input shard ``index``: a function of (seed, index) only."""
    return np.random.default_rng([seed, 2, index]).standard_normal((rows, features)).astype(np.float32)


def make_inputs(inputs: Folder, count: int, *, rows: int, features: int, seed: int,
                process_index: int = 0, process_count: int = 1) -> list[str]:
    """Write the missing synthetic shards this process owns; return the names of all ``count``."""
    names = [synthetic_name(i) for i in range(count)]
    inputs.create()
    present = set(inputs.names())
    for index in range(process_index, count, process_count):
        if names[index] not in present:
            inputs.write(names[index], synthetic_shard(seed, index, rows, features), process_index)
    return names


# ---------------------------------------------------------------- model


def teacher_weights(seed: int, features: int, classes: int) -> tuple[np.ndarray, np.ndarray]:
    """train_mlp's teacher: the network whose argmax labels that workload learns."""
    from workloads import train_mlp

    return train_mlp.teacher(argparse.Namespace(seed=seed, features=features, classes=classes))


def make_model(seed: int, features: int, classes: int, batch_rows: int) -> Callable[[np.ndarray], np.ndarray]:
    """The forward pass on this process's own devices: a ("data", "model") mesh of its local
    devices with every device on "data"; each batch of ``batch_rows`` rows is split across
    them and the weights are replicated. Returns rows -> float32 logits, any number of rows."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    devices = jax.local_devices()
    if batch_rows % len(devices):
        raise SystemExit(f"error: --batch-rows={batch_rows} is not divisible by this process's "
                         f"{len(devices)} devices")
    # No collective in this computation, so the order of the devices does not matter.
    mesh = Mesh(np.array(devices).reshape(len(devices), 1), runtime.MESH_AXES)
    rows_sharding = NamedSharding(mesh, P("data"))
    w1, w2 = (jax.device_put(w, NamedSharding(mesh, P())) for w in teacher_weights(seed, features, classes))

    @jax.jit
    def forward(x):
        return jnp.tanh(x @ w1) @ w2

    def predict(rows: np.ndarray) -> np.ndarray:
        if rows.ndim != 2 or rows.shape[1] != features:
            raise ValueError(f"expected rows of {features} features, got an array of shape {rows.shape}")
        out = np.empty((rows.shape[0], classes), np.float32)
        for start in range(0, rows.shape[0], batch_rows):
            chunk = rows[start:start + batch_rows].astype(np.float32)
            padded = np.zeros((batch_rows, features), np.float32)
            padded[: len(chunk)] = chunk
            result = forward(jax.device_put(padded, rows_sharding))
            out[start:start + len(chunk)] = np.asarray(result)[: len(chunk)]
        return out

    return predict


# ---------------------------------------------------------------- the loop


def predict_shards(names: Sequence[str], inputs: Folder, outputs: Folder,
                   model: Callable[[np.ndarray], np.ndarray], *, process_index: int = 0,
                   process_count: int = 1, delay_s: float = 0.0,
                   log: Callable[[str], None] = print) -> int:
    """Predict this process's shards of ``names`` whose output is missing; return the exit code:
    ``EXIT_OK`` when all its shards are done, ``EXIT_PREEMPTED`` when a preemption notice
    stopped it first (checked before each shard; the shard in flight is finished and renamed).

    Progress: ``report_progress(k)`` after each shard, ``k`` = this process's shards done, the
    ones an earlier attempt wrote included; the run's step is the slowest process's ``k``.
    """
    mine = assigned(names, process_index, process_count)
    outputs.create()
    removed = outputs.remove_leftovers(mine)
    done = set(outputs.names()) & set(mine)
    todo = [name for name in mine if name not in done]
    log(f"process {process_index}/{process_count}: {len(mine)} of {len(names)} shards, "
        f"{len(done)} already done, {len(todo)} to do"
        + (f", {removed} unfinished write(s) removed" if removed else ""))
    count = len(done)
    for name in todo:
        if runtime.preemption_requested():
            log(f"preempted: process {process_index} done {count}/{len(mine)} shards")
            return runtime.EXIT_PREEMPTED
        outputs.write(name, model(inputs.read(name)), process_index)
        count += 1
        runtime.report_progress(count, shards=len(mine))
        log(f"wrote {name} ({count}/{len(mine)})")
        if delay_s > 0:
            time.sleep(delay_s)
    log(f"done: process {process_index} shards={count}/{len(mine)}")
    return runtime.EXIT_OK


def run(argv=None) -> int:
    args = parse_args(argv)
    runtime.install_preemption_handler()  # SIGTERM -> flag, from the earliest moment
    runtime.initialize()  # before any other JAX call (a TPU slice's hosts start together)
    import jax

    index, count = jax.process_index(), jax.process_count()
    inputs, outputs = Folder(args.input_dir), Folder(args.output_dir)
    if args.make_inputs > 0:
        names = make_inputs(inputs, args.make_inputs, rows=args.rows, features=args.features, seed=args.seed,
                            process_index=index, process_count=count)
    else:
        # Every process lists the folder: the set of shards must not change while the run goes.
        names = inputs.names()
        if not names:
            raise SystemExit(f"error: no *{SUFFIX} shards in {args.input_dir}")
    model = make_model(args.seed, args.features, args.classes, args.batch_rows)
    if index == 0:
        print(f"predict: processes={count} devices/process={jax.local_device_count()} shards={len(names)} "
              f"output={args.output_dir}", flush=True)
    return predict_shards(names, inputs, outputs, model, process_index=index, process_count=count,
                          delay_s=args.delay_per_shard, log=lambda msg: print(msg, flush=True))


if __name__ == "__main__":
    sys.exit(run())
