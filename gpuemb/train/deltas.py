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
"""
import hashlib
import json
import os
import uuid

from gpuemb.serve.delta_chain import FORMAT, INDEX, VERSION, delta_file, index_crc
from gpuemb.serve.onnx_models import export_onnx
from gpuemb.store.snapshot import fsync, read_snapshot, save_delta

from .errors import ConfigError


def _sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class DeltaWriter:
    """Writes the deltas of ``tables`` (``{name: EmbeddingTable}``, built with ``track_updates``) and of the dense
    part of ``model`` into ``directory``, every ``every`` steps. ``begin(step)`` before the first step (after a
    resume's ``load_state_dict``), then ``write(step)`` where ``due`` or at a checkpoint."""

    def __init__(self, directory, every, model, tables, world_size=1):
        if world_size > 1:
            raise ConfigError("--delta-every: a run on several ranks writes no deltas yet (each rank's shards "
                              "would need their own files); train in one process to follow it with deltas")
        self.directory, self.every, self.model, self.tables = directory, every, model, tables
        self.chain, self.since, self.step, self.entries, self.first = None, None, 0, [], 0

    def due(self, step):
        return step % self.every == 0

    def state_dict(self):
        """What a checkpoint keeps: the chain's id, the step of the last delta and the tables' markers then."""
        return {"chain": self.chain, "step": self.step, "markers": self.since}

    def load_state_dict(self, state):
        """Continue the chain of a checkpoint's ``state`` (None: its run wrote no deltas, so a new chain starts)."""
        if state is not None:
            self.chain, self.since = state["chain"], dict(state["markers"])

    def begin(self, step):
        """Start at ``step`` (0, or the resumed checkpoint's), taking up the index of this chain in the folder."""
        new = self.chain is None
        self.chain = self.chain or uuid.uuid4().hex
        self.since = self.since or {n: t.marker() for n, t in self.tables.items()}
        self.step, self.first = step, step
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
        """Write the delta of the steps after the last one up to ``step``; returns its table file's path."""
        tables = os.path.join(self.directory, delta_file(step))
        graph = os.path.join(self.directory, delta_file(step, "onnx"))
        until = save_delta(self.tables, tables, self.since)
        tmp = f"{graph}.tmp-{uuid.uuid4().hex[:8]}"
        with open(tmp, "wb") as f:
            f.write(export_onnx(self.model).SerializeToString())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, graph)
        self.entries.append({"step": step, "since": self.step, "checkpoint": bool(checkpoint),
                             "tables": {"file": os.path.basename(tables), "id": read_snapshot(tables).id},
                             "graph": {"file": os.path.basename(graph), "sha256": _sha256(graph)}})
        self.since, self.step = until, step
        self._write_index()
        return tables
