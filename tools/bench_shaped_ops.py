"""The embedding ops of one ``OpShape`` (``bench_shape.py``) through gpuemb's store, as a user builds them, and the
bytes each must move.

gpuemb's side is an ``EmbeddingCollection`` of one ``TableConfig`` per table (tables of one dim and format share
one table-batched store, ``gpuemb/store/batched.py``), fed ``JaggedFeatures`` on the device. Two ops are timed:

- ``forward``: the training lookup and pooling, ``[B, sum of dims]`` out (it finds the batch's distinct ids,
  pins their rows and pools each bag), then ``release`` of its pins, as a forward without a backward does;
- ``backward+update``: ``out.backward(gy)`` after an untimed forward: each distinct row's gradient summed, and the
  row updated in place by the table's rule (weights and optimizer state).

Napkin math of the bytes each must move (``moved_bytes``), per table t with ``N_t`` ids of ``U_t`` distinct rows,
stored rows of ``r_t`` bytes (weights and optimizer state, ``RowFormat.row_bytes``) of which ``w_t`` are weights,
and pooled values of ``o`` bytes (4; 8 for fp64 rows):

    forward  = sum_t N_t·w_t          every id's row of weights read, as the gather reads it
             + 8·N + 8·(T·B + 1)      the ids and the bags' offsets (int64)
             + o·B·sum(D)             the pooled output written
    backward = sum_t 2·U_t·r_t        each distinct row read and written once, whole
             + o·B·sum(D)             the output's gradient read
             + 8·N + 8·(T·B + 1)      the ids and offsets again

The forward counts every id's row, as FBGEMM's benchmark does, so ids that repeat (a Zipf law's hot rows) and
small tables read from a CPU's L2/L3 or a GPU's L2 rather than from memory: its rate may pass the copy ceiling
(above 100%). Max pooling's argmax is not counted.
"""
import numpy as np

from bench_clock import median_seconds
from bench_shape import N_BATCHES, PRECISIONS
from gpuemb.autograd import backend
from gpuemb.io.jagged import JaggedFeatures
from gpuemb.optim.rule import RULES
from gpuemb.store import EmbeddingCollection, Initializer, TableConfig, release
from gpuemb.store.row_format import RowFormat

def configs(shape):
    """One ``TableConfig`` per table of ``shape``."""
    return [TableConfig(name=f"t{t}", dim=d, dtype=PRECISIONS[shape.precision], rule=RULES[shape.optimizer](),
                        lr=shape.lr, initializer=Initializer(seed=shape.seed))
            for t, d in enumerate(shape.per_table("dims"))]


def collection(shape):
    """The ``EmbeddingCollection`` of ``shape``: its output is ``[B, sum of dims]`` (``[B, T, D]`` where every
    table has dim D)."""
    return EmbeddingCollection(configs(shape), mode=shape.pooling, mixed_dims=True)


def jagged(shape, batch):
    """``JaggedFeatures`` of a batch ``(values, lengths)`` of ``shape.batches``, its ids on the device."""
    values, lengths = batch
    return JaggedFeatures.from_lengths([f"t{t}" for t in range(shape.tables)], backend.to_device(values), lengths)


def moved_bytes(shape, batches):
    """``{"forward": bytes, "backward": bytes}`` of the module docstring, the mean over ``batches``."""
    formats = [RowFormat(RULES[shape.optimizer](), d, PRECISIONS[shape.precision]) for d in shape.per_table("dims")]
    out_bytes = 8 if shape.precision == "fp64" else 4
    width = sum(shape.per_table("dims"))
    forward, backward = [], []
    for values, lengths in batches:
        ends = np.cumsum(lengths.reshape(shape.tables, -1).sum(axis=1))
        per_table = np.split(values, ends[:-1])
        indices = 8 * values.size + 8 * (lengths.size + 1)
        pooled = out_bytes * shape.batch * width
        forward.append(sum(ids.size * f.weight_bytes for ids, f in zip(per_table, formats)) + indices + pooled)
        backward.append(sum(2 * np.unique(ids).size * f.row_bytes for ids, f in zip(per_table, formats))
                        + pooled + indices)
    return {"forward": float(np.mean(forward)), "backward": float(np.mean(backward))}


def seconds(shape, budget=0.4):
    """``{"forward": s, "backward": s}``: gpuemb's median time of each op on ``shape``, cycling through
    ``N_BATCHES`` batches."""
    table = collection(shape)
    inputs = [jagged(shape, b) for b in shape.batches(N_BATCHES)]
    turn = iter(range(1 << 62))

    def forward():
        return table(inputs[next(turn) % len(inputs)])
    first = forward()
    gy = backend.xp.asarray(np.random.default_rng(shape.seed).standard_normal(first.shape).astype(first.data.dtype))
    release(first)
    timing = dict(sync=backend.synchronize, warmup=2 * len(inputs), budget=budget)
    return {"forward": median_seconds(lambda: release(forward()), **timing),
            "backward": median_seconds(lambda out: out.backward(gy), setup=forward, **timing)}
