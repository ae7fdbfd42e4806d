"""Online deltas of a training run, for a server to follow (docs/serve.md, "Following a training run").

Every ``--delta-every`` steps, at each checkpoint and at the last step, the run writes into ``--delta-dir``:

- ``delta-<step>.h5``: the rows inserted or updated and the keys dropped since the delta before, a snapshot of kind
  delta (``gpuemb.store.snapshot.save_delta``: CRC per chunk, sealed, renamed into place);
- ``delta-<step>.onnx``: the dense part at that step, as a bundle's ``model.onnx`` (the dense weights move too, and
  are small beside the tables);
- ``deltas.json``, the index, rewritten atomically after each delta: the chain's id, the step its first delta
  starts from, and per delta its step, the step it starts from, whether a checkpoint was written there, its table
  file's snapshot id and its graph's SHA-256. A follower applies the deltas in this order from the step its bundle
  was exported at.

The index's format is the reader's (``gpuemb/serve/delta_chain.py``), and a run that writes deltas needs onnx
(the serve extra). A delta is written at every checkpoint, so every checkpoint is a point of the chain that a
bundle exported from it can follow on from. The chain survives a resume: the checkpoint's state holds the chain's id
and the tables' markers (``state_dict``), which are their update clocks, restored with their rows; a resumed run
drops the index's entries after its checkpoint and writes them again, with the same rows (a resume continues bit
for bit).

On W ranks each rank writes the changes of its own shards, ``delta-<step>.rank<r>-of-<W>.h5``, with its rank, W and
each shard's placement (kind, weight columns, whole dim) in the file's meta under ``"sharded"``, as a sharded
snapshot records them (``gpuemb/distributed/sharded_snapshot.py``); a data-parallel replica is rank 0's alone. Rank 0
writes the graph and the index, whose entry lists every rank's file; the writes are agreed, so if any rank failed
every rank raises. A follower joins the files into whole tables (``gpuemb/serve/delta_join.py``).

A table's markers are its rank's own update clock, and a delta is written at every checkpoint, so the markers of a
checkpoint are the clocks its tables are restored with: a resume takes them from the restored tables, on every rank
and at any world size (a resharded table takes the largest clock of its old shards, and no key's tick is past it).
The chain goes on across a resume at another world size, each delta listing the files of the ranks that wrote it.
"""
import hashlib
import json
import os
import uuid

import numpy as np

from gpuemb.distributed import ShardedEmbeddingCollection
from gpuemb.serve.delta_chain import FORMAT, INDEX, VERSION, delta_file, index_crc, rank_file
from gpuemb.serve.onnx_models import export_onnx
from gpuemb.store.snapshot import fsync, read_snapshot, save_delta

from .errors import CheckpointError, ConfigError
from .model import collections_of


def _sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def placement(model, rank):
    """``{table: {"kind", "cols", "dim"}}`` of the shards this ``rank`` writes: its own, and the data-parallel
    replicas on rank 0 only."""
    return {n: {"kind": s.kind, "cols": list(s.cols), "dim": c.plan.placement(n).table.dim}
            for _, c in collections_of(model, ShardedEmbeddingCollection) for n, s in c.shards.items()
            if s.kind != "data" or rank == 0}


class DeltaWriter:
    """Writes the deltas of ``tables`` (``{name: EmbeddingTable}``, built with ``track_updates``; a rank's shards
    on several) and of the dense part of ``model`` into ``directory``, every ``every`` steps; ``cluster``: the
    run's ``Cluster``. ``begin(step)`` before the first step (after a resume's ``load_state_dict``), then
    ``write(step)`` where ``due`` or at a checkpoint; every rank calls each."""

    def __init__(self, directory, every, model, tables, cluster):
        self.directory, self.every, self.model, self.cluster = directory, every, model, cluster
        self.shards = placement(model, cluster.rank) if cluster.world_size > 1 else None
        self.tables = tables if self.shards is None else {n: tables[n] for n in self.shards}
        self.chain, self.since, self.step, self.entries, self.first = None, None, 0, [], 0

    def due(self, step):
        return step % self.every == 0

    def state_dict(self):
        """What a checkpoint keeps: the chain's id and the step of the last delta (the markers are the tables')."""
        return {"chain": self.chain, "step": self.step}

    def load_state_dict(self, state):
        """Continue the chain of a checkpoint's ``state`` (None: its run wrote no deltas, so a new chain starts)."""
        if state is not None:
            self.chain = state["chain"]

    def begin(self, step):
        """Start at ``step`` (0, or the resumed checkpoint's), taking up the index of this chain in the folder:
        rank 0's, and every rank raises if it cannot."""
        self.since = {n: t.marker() for n, t in self.tables.items()}  # restored with the rows: see the docstring
        self.step, self.first, error = step, step, None
        if self.cluster.lead:
            try:
                self._take_index(step)
            except (ConfigError, OSError) as e:
                error = e if isinstance(e, ConfigError) else ConfigError(
                    f"--delta-dir {self.directory}: cannot be written ({e}); pass a writable folder")
        if not self.cluster.everywhere(error is None):
            raise error or ConfigError(f"--delta-dir {self.directory}: rank 0 could not take it for this run (its "
                                       "error says why)")

    def _take_index(self, step):
        new = self.chain is None
        self.chain = self.chain or uuid.uuid4().hex
        os.makedirs(self.directory, exist_ok=True)
        body = self._read_index()
        if body is not None and (new or body["chain"] != self.chain):
            raise ConfigError(f"--delta-dir {self.directory}: holds the deltas of another run (chain "
                              f"{body['chain'][:8]}); pass an empty folder, or --resume the run that wrote them")
        if body is not None:  # the entries after the checkpoint are written again
            self.first, self.entries = body["first"], [e for e in body["deltas"] if e["step"] <= step]
        self._write_index()

    def _read_index(self):
        path = os.path.join(self.directory, INDEX)
        if not os.path.exists(path):
            return None
        try:
            with open(path) as f:
                doc = json.load(f)
            body = doc["body"]
            if index_crc(body) != doc["crc32"] or body.get("format") != FORMAT:
                raise ValueError("its checksum or format is not a delta index's")
            return body
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"--delta-dir {self.directory}: its {INDEX} cannot be read ({e}); pass an empty "
                              "folder") from None

    def _write_index(self):
        body = {"format": FORMAT, "version": VERSION, "chain": self.chain, "first": self.first,
                "deltas": self.entries}
        path = os.path.join(self.directory, INDEX)
        tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
        with open(tmp, "w") as f:
            json.dump({"body": body, "crc32": index_crc(body)}, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync(self.directory)

    def write(self, step, checkpoint=False):
        """Write the delta of the steps after the last one up to ``step``: this rank's table file, and on rank 0
        the graph and the index's entry; returns this rank's table file's path."""
        c, error, until = self.cluster, None, None
        name = delta_file(step) if self.shards is None else rank_file(step, c.rank, c.world_size)
        tables, mine = os.path.join(self.directory, name), np.zeros(17, np.uint8)
        try:
            meta = {} if self.shards is None else {"sharded": {"rank": c.rank, "world_size": c.world_size,
                                                               "shards": self.shards}}
            until = save_delta(self.tables, tables, self.since, meta)
            mine[1:] = np.frombuffer(bytes.fromhex(read_snapshot(tables).id), np.uint8)
            mine[0] = 1
        except Exception as e:  # raised below, once every rank knows: none may wait for a file that never comes
            error = e
        ids = c.comm.allgather(mine[None], tag="deltas")  # [W, 17]: whether each rank wrote, and its file's id
        if c.lead and error is None and ids[:, 0].all():
            try:
                files = [{"file": rank_file(step, r, c.world_size) if self.shards else name,
                          "id": ids[r, 1:].tobytes().hex()} for r in range(c.world_size)]
                self._write_graph(step, checkpoint, files)
            except Exception as e:  # noqa: BLE001  the same: every rank raises below
                error = e
        if not c.everywhere(error is None):
            if error is not None:
                raise error
            raise CheckpointError(f"--delta-dir {self.directory}: another rank could not write its part of the "
                                  f"delta of step {step} (its error says why)")
        self.since, self.step = until, step
        return tables

    def _write_graph(self, step, checkpoint, files):
        """The dense part's graph, then the index's entry of the delta of ``step`` whose table ``files`` are
        written (one, or one a rank)."""
        graph = os.path.join(self.directory, delta_file(step, "onnx"))
        tmp = f"{graph}.tmp-{uuid.uuid4().hex[:8]}"
        with open(tmp, "wb") as f:
            f.write(export_onnx(self.model).SerializeToString())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, graph)
        self.entries.append({"step": step, "since": self.step, "checkpoint": bool(checkpoint),
                             "tables": files[0] if self.shards is None else {"ranks": files},
                             "graph": {"file": os.path.basename(graph), "sha256": _sha256(graph)}})
        self._write_index()
