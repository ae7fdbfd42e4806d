"""The files that tools/fuzz_files.py mutates: how each kind is made, and how gpuemb reads it back.

A subject is a folder of pristine files made once (``build``, in a process of its own: it trains and compiles,
and the fuzzing process forks children, which must not inherit numba's threads), the files in it a mutation may
hit, and a reader: the public entry point a user would call, returning a digest of everything it read. A read
either gives the pristine digest, or raises one of the subject's refusals (gpuemb's own one-line errors).
"""
import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(ROOT, "tests", "io", "data", "criteo_sample.tsv")
CONFIG = {"model": "dcn", "steps": 40, "batch_size": 32, "embedding_dim": 8, "lr": 0.05, "seed": 3,
          "model_arg": {"cross_layers": 2}, "metrics_out": "m.jsonl"}
DENSE, SPARSE = np.linspace(-1, 2, 6 * 13, dtype=np.float32).reshape(6, 13), np.arange(6 * 26).reshape(6, 26)


@dataclass(frozen=True)
class Subject:
    """``targets``: the files (relative to the subject's folder) a mutation hits; ``read(folder)``: the digest of
    what gpuemb reads there; ``checked``: whether the format carries checksums (a config file does not, so an
    edited value that still parses is a config the user wrote, not a silent difference)."""
    kind: str
    targets: tuple
    read: object
    refusals: tuple
    checked: bool = True
    fallbacks: object = None  # folder -> the readers of the older, whole versions a read may fall back to

    def fallback_reads(self, folder):
        return self.fallbacks(folder) if self.fallbacks else []


def digest(*values):
    """A SHA-256 of arrays, dicts, lists and scalars, the same for equal values."""
    h = hashlib.sha256()

    def add(v):
        if isinstance(v, np.ndarray):
            h.update(f"{v.dtype.str}{v.shape}".encode())
            h.update(np.ascontiguousarray(v).tobytes())
        elif isinstance(v, dict):
            for k in sorted(v, key=str):
                h.update(repr(k).encode())
                add(v[k])
        elif isinstance(v, (list, tuple)):
            h.update(f"[{len(v)}".encode())
            for x in v:
                add(x)
        else:
            h.update(repr(v).encode())
    for v in values:
        add(v)
    return h.hexdigest()


# -- readers (in the fuzzing process and its children: no training, no numba kernels) -------------------------
def read_snapshot_file(path):
    from gpuemb.store.snapshot import read_snapshot
    snap = read_snapshot(path)
    tables = {}
    for name, t in snap.tables.items():
        whole = t.load_all()
        tables[name] = [t.config, t.layout, whole.keys, whole.rows, whole.steps, t.clock,
                        [t.extra(n) for n in ("pending", "ticks", "deleted")]]
    return digest(snap.id, snap.kind, snap.base, snap.meta, tables)


def read_shards(folder):
    from gpuemb.io.shards import ShardSource
    with ShardSource(folder) as src:
        blocks = [src.read_block(i) for i in range(len(src.blocks))]
    return digest([[*b.arrays(), *((b.bags.lengths, b.bags.values) if b.bags is not None else ())]
                   for b in blocks])


def read_checkpoint(folder, step=None):
    """What a resume from the checkpoint dir reads (or, with ``step``, from that checkpoint by its path)."""
    from gpuemb.train.checkpoint import find_resume, read_state
    where = os.path.join(folder, "ckpt", *([step] if step else []))
    found, body = find_resume(where, warn=lambda line: None)
    found = os.path.basename(found)
    state = read_state(os.path.join(folder, "ckpt", found))
    tables = [read_snapshot_file(os.path.join(folder, "ckpt", found, name)) for name in sorted(body["files"])
              if name != "state.h5"]
    return digest(found, body, state, tables)


def _older_checkpoints(folder):
    """A reader of each checkpoint before the newest, by its path: a resume that passes over a damaged newest one
    (saying so) and takes one of them is right."""
    steps = sorted(os.listdir(os.path.join(folder, "ckpt")))[:-1]
    return [lambda d, s=s: read_checkpoint(d, s) for s in steps if s.startswith("step-")]


def read_bundle(folder):
    from gpuemb.serve import Predictor
    return digest(Predictor(os.path.join(folder, "bundle"), runtime="numpy").predict(DENSE, SPARSE))


def read_config(path):
    from gpuemb.train.config import TrainConfig
    return digest(TrainConfig.from_file(path).to_dict())


def subjects(kinds=None):
    """The subjects of ``kinds`` (all by default), by kind."""
    from gpuemb.io.errors import DataError
    from gpuemb.serve.errors import BundleError
    from gpuemb.store.snapshot import SnapshotError
    from gpuemb.train.errors import CheckpointError, ConfigError
    table = {
        "snapshot": Subject("snapshot", ("embeddings.h5",), lambda d: read_snapshot_file(
            os.path.join(d, "embeddings.h5")), (SnapshotError,)),
        "delta": Subject("delta", ("delta.h5",), lambda d: read_snapshot_file(os.path.join(d, "delta.h5")),
                         (SnapshotError,)),
        "shards": Subject("shards", ("train/part-00000.h5", "train/part-00001.h5", "train/*.json"),
                          lambda d: read_shards(os.path.join(d, "train")), (DataError,)),
        "jagged": Subject("jagged", ("train/part-00000.h5", "train/*.json"),
                          lambda d: read_shards(os.path.join(d, "train")), (DataError,)),
        "checkpoint": Subject("checkpoint", (f"ckpt/{NEWEST}/*", "ckpt/latest"), read_checkpoint,
                              (CheckpointError,), fallbacks=_older_checkpoints),
        "bundle": Subject("bundle", ("bundle/*",), read_bundle, (BundleError,)),
        "config-toml": Subject("config-toml", ("run.toml",), lambda d: read_config(os.path.join(d, "run.toml")),
                               (ConfigError,), checked=False),
        "config-json": Subject("config-json", ("run.json",), lambda d: read_config(os.path.join(d, "run.json")),
                               (ConfigError,), checked=False),
    }
    unknown = set(kinds or ()) - set(table)
    if unknown:
        raise ValueError(f"--kinds: unknown {sorted(unknown)}; use some of {', '.join(table)}")
    return {k: s for k, s in table.items() if not kinds or k in kinds}


# -- building (in a process of its own) -------------------------------------------------------------------------
def build(root, kinds):
    """Make the pristine files of ``kinds`` under ``root/<kind>``."""
    for kind in kinds:
        folder = os.path.join(root, kind)
        os.makedirs(folder, exist_ok=True)
        BUILDERS[kind](folder)


def _snapshot(folder):
    from gpuemb.store.snapshot import TableSnapshot, write_snapshot
    rng = np.random.default_rng(15)
    n = 300
    keys, steps = rng.permutation(10 * n)[:n].astype(np.int64), rng.integers(1, 99, n).astype(np.int32)
    rows = rng.standard_normal((n, 6)).astype(np.float32)
    write_snapshot(os.path.join(folder, "embeddings.h5"), {"emb": TableSnapshot(
        {"dim": 4}, {"weights": [0, 4], "v": [4, 6]}, keys, rows, steps)}, chunk_rows=64, meta={"step": 3})


def _delta(folder):
    """A delta of a live table that trained, admitted, evicted and deleted: every extra dataset is in it."""
    from gpuemb.autograd import Tensor
    from gpuemb.optim import AdagradRule
    from gpuemb.store.options import EvictionRule, Initializer, StoreOptions, TableConfig
    from gpuemb.store.snapshot import save_delta
    from gpuemb.store.table import EmbeddingTable
    rng = np.random.default_rng(4)
    t = EmbeddingTable(TableConfig("t", 4, initializer=Initializer("normal", 0.5, seed=9), rule=AdagradRule(),
                                   lr=0.1, options=StoreOptions(slab_rows=64), track_updates=True, admit_after=2,
                                   evict=EvictionRule(ttl_steps=15), evict_every=10))

    def train(n):
        for _ in range(n):
            y = t.lookup(rng.integers(0, 400, 24) * 13)
            (y * Tensor(rng.standard_normal(y.shape).astype(np.float32))).sum().backward()
    train(20)
    since = t.marker()
    train(12)
    t.delete(np.concatenate(list(t.keys()))[:15])
    save_delta(t, os.path.join(folder, "delta.h5"), since)


def _shards(folder):
    from gpuemb.io.convert import ConvertOptions, convert
    from gpuemb.io.formats import schema_for
    from gpuemb.io.shards import WriteOptions
    convert([SAMPLE], folder, schema_for("criteo", [SAMPLE]), ConvertOptions(
        write=WriteOptions(chunk_rows=32, rows_per_shard=64)))


def _jagged(folder):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from gpuemb.io.convert import ConvertOptions, convert
    from gpuemb.io.formats import schema_for
    from gpuemb.io.shards import WriteOptions
    rng = np.random.default_rng(8)
    n = 90
    tags = [list(rng.integers(0, 1000, rng.integers(0, 5))) for _ in range(n)]
    path = os.path.join(folder, "source.parquet")
    pq.write_table(pa.table({"y": rng.integers(0, 2, n).astype(np.float32), "a": rng.random(n), "c": rng.integers(
        0, 50, n), "tags": pa.array(tags, pa.list_(pa.int64()))}), path)
    schema = schema_for("parquet", [path], label=["y"], dense=["a"], categorical=["c", "tags"], kind="int")
    convert([path], folder, schema, ConvertOptions(write=WriteOptions(chunk_rows=32, rows_per_shard=1024)))
    os.remove(path)


def _tool(*args, cwd):
    done = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{' '.join(args[:1])} failed: {done.stderr.strip()[-2000:]}")


NEWEST = "step-000000006"  # of the two checkpoints _checkpoint writes: what a resume reads, and what is mutated


def _checkpoint(folder):
    _tool(os.path.join(ROOT, "tools", "train.py"), "--steps", "6", "--batch-size", "32", "--embedding-dim", "4",
          "--eval-rows", "64", "--train-rows", "512", "--checkpoint-dir", "ckpt", "--checkpoint-every", "3",
          "--no-progress", cwd=folder)


def _bundle(folder):
    _checkpoint(folder)
    _tool(os.path.join(ROOT, "tools", "export.py"), "ckpt", "--out", "bundle", cwd=folder)
    import shutil
    shutil.rmtree(os.path.join(folder, "ckpt"))


def _configs(folder):
    with open(os.path.join(folder, "run.json"), "w") as f:
        json.dump(CONFIG, f)
    with open(os.path.join(folder, "run.toml"), "w") as f:
        for k, v in CONFIG.items():  # TOML's inline table: {k = v, ...}
            text = "{" + ", ".join(f"{a} = {json.dumps(b)}" for a, b in v.items()) + "}" if isinstance(v, dict) \
                else json.dumps(v)
            f.write(f"{k} = {text}\n")


KINDS = ("snapshot", "delta", "shards", "jagged", "checkpoint", "bundle", "config-toml", "config-json")
BUILDERS = {"snapshot": _snapshot, "delta": _delta, "shards": _shards, "jagged": _jagged,
            "checkpoint": _checkpoint, "bundle": _bundle, "config-toml": _configs, "config-json": _configs}
